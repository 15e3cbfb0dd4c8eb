"""Media content parts in chat messages: what each part points at (a MediaRef), and
the marker that stands for it in the rendered prompt until the projector replaces it
with the media's tokens.

Part shapes, as the APIs' edges hand them over (Anthropic and Responses blocks are
translated to these first):
  {"type": "image_url", "image_url": {"url": ...}}            (or "image_url": "...")
  {"type": "input_audio", "input_audio": {"data": ..., "format": "wav"}}  ("url" too)
  {"type": "video_url", "video_url": {"url": ..., "fps": 2.0}}
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from typing import Any

from mlxcel.chat.errors import ChatInputError
from mlxcel.media import MediaRef, check_combination

# drawn at start, as llama-server does, so no prompt text can forge it
MEDIA_MARKER = f"<__media_{secrets.token_urlsafe(24).replace('-', 'a').replace('_', 'b')}__>"

MEDIA_PART_TYPES = {"image_url", "image", "input_image", "video_url", "video", "input_video", "input_audio", "audio",
                    "file"}
_KINDS = {"image_url": "image", "input_audio": "audio", "video_url": "video", "input_video": "video"}
NEEDS = {"image": "vision", "video": "vision", "audio": "audio"}
# set by an edge that translates its own blocks into these parts (Anthropic, Responses):
# where the client sent the part, so that a refusal names the client's path, not the
# translated message's (a system prompt or tool results move the indices)
SENT_AT = "_sent_at"


def sent_at(part: dict, where: str) -> dict:
    """`part` marked as sent at `where` (see SENT_AT)."""
    return {**part, SENT_AT: where}


@dataclass
class MediaIntake:
    """What the served model accepts, and the media parts met so far, in prompt order."""

    model: str
    vision: bool = False
    audio: bool = False
    refs: list[MediaRef] = field(default_factory=list)

    def take(self, part: dict, where: str) -> str:
        """The part's marker text, its MediaRef recorded; a 400 for a part the model
        cannot take or one that is malformed."""
        ref = media_ref(part, where)
        check_combination([*self.refs, ref])  # the spec's 400 comes first, whatever the projector takes
        if not getattr(self, NEEDS[ref.kind]):
            raise unsupported(part.get("type"), where, self.model)
        self.refs.append(ref)
        return MEDIA_MARKER


def unsupported(kind: Any, where: str, model: str | None) -> ChatInputError:
    named = f"model '{model}'" if model else "the loaded model"
    return ChatInputError(f"{where}: {kind} input is not supported by {named} (start it with a --mmproj projector "
                          "that takes this kind of media)", code="unsupported_content_type")


def _url_field(value: Any, key: str, where: str) -> str:
    if isinstance(value, str):
        url = value
    elif isinstance(value, dict):
        url = value.get(key)
    else:
        url = None
    if not isinstance(url, str) or not url:
        raise ChatInputError(f"{where}: a non-empty string '{key}' is required")
    return url


def media_ref(part: dict, where: str) -> MediaRef:
    kind = part.get("type")
    if kind not in _KINDS:
        raise ChatInputError(f"{where}: {kind} parts are not supported (image_url, input_audio and video_url are)",
                             code="unsupported_content_type")
    body = part.get(kind)
    if kind == "image_url":
        return MediaRef(kind="image", url=_url_field(body, "url", f"{where}.image_url"), where=where)
    if kind == "input_audio":
        if not isinstance(body, dict):
            raise ChatInputError(f"{where}.input_audio must be an object with 'data'")
        data = body.get("data", body.get("url"))
        if not isinstance(data, str) or not data:
            raise ChatInputError(f"{where}.input_audio: a non-empty string 'data' is required")
        fmt = body.get("format")
        if fmt is not None and not isinstance(fmt, str):
            raise ChatInputError(f"{where}.input_audio.format must be a string")
        return MediaRef(kind="audio", url=data, where=where, format=fmt)
    url = _url_field(body, "url", f"{where}.{kind}")
    fps = body.get("fps") if isinstance(body, dict) else None
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps)
                            or not 0 < fps <= 60):
        raise ChatInputError(f"{where}.{kind}.fps must be a number in (0, 60]")
    return MediaRef(kind="video", url=url, where=where, fps=float(fps) if fps is not None else None)


def join_parts(texts: list[tuple[str, bool]]) -> str:
    """Content parts as one string, as llama-server joins them: text parts separated by
    newlines, no newline before or after a media marker. `texts`: (text, is_marker)."""
    out = ""
    after_marker = False
    for text, is_marker in texts:
        if not is_marker and out and not after_marker:
            out += "\n"
        out += text
        after_marker = is_marker
    return out
