"""The compaction capsule: a compaction item's `encrypted_content`, base64url JSON
holding the summary and the retained items. It is not encrypted; clients send it back
as they send any other input item."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass

from mlxcel.chat.errors import ChatInputError

VERSION = 1


@dataclass
class Capsule:
    summary: str
    retained: list[dict]


def encode_capsule(capsule: Capsule) -> str:
    payload = {"v": VERSION, "summary": capsule.summary, "retained": capsule.retained}
    raw = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def decode_capsule(text: object, where: str) -> Capsule:
    """The capsule in a compaction item; anything but one this server made (garbled
    base64, other JSON, lone surrogates, NaN, nesting too deep) is a 400."""
    def bad(why: str) -> ChatInputError:
        return ChatInputError(f"{where}.encrypted_content: {why}", code="invalid_encrypted_content")

    if not isinstance(text, str) or not text:
        raise bad("a compaction capsule string is required")
    try:
        raw = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
        payload = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        json.dumps(payload, ensure_ascii=False).encode("utf-8")  # no lone surrogates
    except (binascii.Error, ValueError, RecursionError):  # UnicodeError is a ValueError
        raise bad("not a compaction capsule made by this server") from None
    if not isinstance(payload, dict) or payload.get("v") != VERSION:
        raise bad("not a compaction capsule made by this server")
    summary, retained = payload.get("summary"), payload.get("retained")
    if not isinstance(summary, str) or not isinstance(retained, list) or not all(isinstance(i, dict) for i in retained):
        raise bad("the capsule is malformed")
    return Capsule(summary, retained)
