"""What every request body must satisfy before any work: JSON numbers that are
finite and bounded, strings that are valid Unicode, bounded nesting and size, and the
counted caps of `RequestLimits`. JSON itself allows lone surrogates ("\\ud800"),
NaN and 1e999; no tokenizer, template, sampler or response may see them."""

from __future__ import annotations

import json
import math

from mlxcel.config import RequestLimits
from mlxcel.turn.prompts import split_prompts

INT_LIMIT = 1 << 63  # no field of any API means an integer beyond int64


class BodyError(ValueError):
    """A request body that breaks a bound; `message` names the field and the bound."""

    def __init__(self, message: str, status: int = 400, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code


def _reject_constant(name: str):
    raise BodyError(f"malformed JSON in the request body: {name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BodyError(f"malformed JSON in the request body: the number {text[:32]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    if len(text) > 20:
        raise BodyError(f"malformed JSON in the request body: the integer {text[:24]}... is out of range")
    value = int(text)
    if not -INT_LIMIT <= value < INT_LIMIT:
        raise BodyError(f"malformed JSON in the request body: the integer {text} is out of range")
    return value


def parse_json(raw: bytes):
    """json.loads with NaN, ±Infinity, overflowing floats and integers beyond int64
    refused."""
    try:
        return json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except BodyError:
        raise
    except RecursionError:
        raise BodyError("malformed JSON in the request body: nested too deeply") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BodyError(f"malformed JSON in the request body: {exc}") from None
    except ValueError as exc:
        raise BodyError(f"malformed JSON in the request body: {exc}") from None


PATH_HEAD, PATH_TAIL, PATH_KEY_CHARS = 4, 2, 40


def field_path(parts: tuple) -> str:
    """`messages[1].content`. A deep path shows its first PATH_HEAD and last PATH_TAIL
    steps, and a long key its first PATH_KEY_CHARS characters: an error names where,
    without echoing a client's schema or a hundred levels of its keys."""
    if len(parts) > PATH_HEAD + PATH_TAIL + 1:
        parts = (*parts[:PATH_HEAD], f"…{len(parts) - PATH_HEAD - PATH_TAIL} levels…", *parts[-PATH_TAIL:])
    out = ""
    for part in parts:
        if not isinstance(part, int) and len(part) > PATH_KEY_CHARS:
            part = part[:PATH_KEY_CHARS] + "…"
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "body"


def _is_valid_text(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# where media payloads (URLs, base64 data) sit: bounded by the body size and the media
# limits (--media-max-bytes), not by --max-chars, which bounds text a tokenizer reads
_MEDIA_FIELDS = {("image_url", "url"), ("video_url", "url"), ("input_video", "url"), ("input_audio", "data"),
                 ("input_audio", "url"), ("source", "data"), ("source", "url")}


def _is_media_payload(path: tuple) -> bool:
    if len(path) >= 2 and (path[-2], path[-1]) in _MEDIA_FIELDS:
        return True
    if path and path[-1] == "image_url":  # Responses' input_image: the URL itself
        return True
    return len(path) >= 2 and path[-2] == "multimodal_data" and isinstance(path[-1], int)


def check_strings_and_nesting(data, max_depth: int, max_chars: int) -> int:
    """Walk the whole body (without recursion): every key and string valid Unicode,
    nesting within `max_depth`, all strings together within `max_chars` characters
    (media payloads are not text: they are bounded elsewhere). Returns the characters
    counted."""
    total = 0
    stack: list[tuple[object, tuple, int]] = [(data, (), 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            if not _is_media_payload(path):
                total += len(value)
            if not _is_valid_text(value):
                raise BodyError(f"{field_path(path)}: the string is not valid Unicode (a lone surrogate?)")
            continue
        if isinstance(value, dict):
            if depth >= max_depth:
                raise BodyError(f"{field_path(path)}: nested deeper than {max_depth} levels")
            for key, item in value.items():
                total += len(key)
                if not _is_valid_text(key):
                    raise BodyError(f"{field_path(path)}: a key is not valid Unicode (a lone surrogate?)")
                stack.append((item, (*path, key), depth + 1))
        elif isinstance(value, list):
            if depth >= max_depth:
                raise BodyError(f"{field_path(path)}: nested deeper than {max_depth} levels")
            stack.extend((item, (*path, i), depth + 1) for i, item in enumerate(value))
        if total > max_chars:
            break
    if total > max_chars:
        raise BodyError(f"the request holds more than {max_chars} characters of text (--max-chars)", status=413)
    return total


def _count(value) -> int:
    if isinstance(value, (list, dict)):
        return len(value)
    return 0


def _prompt_count(prompt) -> int:
    """Prompts in a completion request's `prompt`, split as llama-server splits them."""
    return len(split_prompts(prompt))


def check_counts(data: dict, limits: RequestLimits) -> None:
    """The counted caps, on the top-level fields every API names the same way."""
    caps = (
        ("messages", limits.max_messages, "--max-messages"),
        ("input", limits.max_messages, "--max-messages"),
        ("tools", limits.max_tools, "--max-tools"),
        ("logit_bias", limits.max_logit_bias, "--max-logit-bias"),
    )
    for name, cap, flag in caps:
        n = _count(data.get(name))
        if n > cap:
            raise BodyError(f"{name}: {n} entries exceed the cap of {cap} ({flag})")
    for name in ("stop", "stop_sequences"):
        stops = data.get(name)
        stops = [stops] if isinstance(stops, str) else stops
        if not isinstance(stops, list):
            continue
        if len(stops) > limits.max_stop:
            raise BodyError(f"{name}: {len(stops)} stop strings exceed the cap of {limits.max_stop} (--max-stop)")
        for i, stop in enumerate(stops):
            if isinstance(stop, str) and len(stop) > limits.max_stop_chars:
                raise BodyError(f"{name}[{i}]: {len(stop)} characters exceed the cap of {limits.max_stop_chars} "
                                "(--max-stop-chars)")
    if "prompt" in data:
        n = _prompt_count(data["prompt"])
        if n > limits.max_prompts:
            raise BodyError(f"prompt: {n} prompts exceed the cap of {limits.max_prompts} (--max-prompts)")


def parse_and_check(raw: bytes, limits: RequestLimits, max_chars: int) -> dict:
    """A request body as a checked JSON object, or BodyError."""
    if not raw.strip():
        raise BodyError("the request body is empty; a JSON object is required")
    data = parse_json(raw)
    if not isinstance(data, dict):
        raise BodyError("the request body must be a JSON object")
    check_strings_and_nesting(data, limits.max_depth, max_chars)
    check_counts(data, limits)
    return data
