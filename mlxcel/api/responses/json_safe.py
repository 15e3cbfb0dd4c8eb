"""Response objects that can always be sent: what the Responses API stores for later
GETs must serialize as strict UTF-8 JSON, or every poll of it would fail.

`is_json_safe` checks a value the way the HTTP layer will encode it; `json_safe`
returns a copy that passes: lone surrogates become U+FFFD, NaN and infinities null,
other objects their str()."""

from __future__ import annotations

import json
import math
from typing import Any


def is_json_safe(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return False
    return True


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _clean(value: Any, depth: int) -> Any:
    if depth > 64:
        return None
    if isinstance(value, str):
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value) if _has_surrogate(value) else value
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {_clean(str(k), depth + 1): _clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v, depth + 1) for v in value]
    return _clean(str(value), depth + 1)


def json_safe(value: Any) -> Any:
    """`value` itself when it already serializes, else a cleaned copy."""
    return value if is_json_safe(value) else _clean(value, 0)
