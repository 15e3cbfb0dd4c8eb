"""Finding where JSON values end, and the model's own text of their parts.

Calls written as JSON keep the model's text for object arguments (key order,
spacing, number forms), so these helpers hand back raw slices rather than
re-serialised values.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

_DECODER = json.JSONDecoder()
_CLOSERS = {"{": "}", "[": "]"}
T = TypeVar("T")


class Malformed(ValueError):
    """The text cannot be the JSON value it started as; `at` is where that showed."""

    def __init__(self, at: int) -> None:
        super().__init__(f"malformed JSON at {at}")
        self.at = at


class BraceScanner:
    """Follows JSON nesting through text fed piece by piece, skipping strings.

    `scan` stops just past the bracket that closes the outermost one (`depth` of
    them may be open already), or at the first of `stop_chars` met outside a
    string: characters JSON never has there, so the value will not close. A closing
    bracket of the wrong kind still closes; `mismatch` keeps where the first was."""

    def __init__(self, depth: int = 0, stop_chars: str = "") -> None:
        self.closers = [""] * depth  # what each open bracket wants; "" when not seen
        self.stop_chars = stop_chars
        self.in_string = self.escaped = False
        self.mismatch: int | None = None

    def scan(self, text: str, start: int = 0) -> int:
        """Index just past the end of the value, the index of a stop character,
        or -1 when neither has come yet."""
        for i in range(start, len(text)):
            ch = text[i]
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == '"':
                    self.in_string = False
            elif ch == '"':
                self.in_string = True
            elif ch in _CLOSERS:
                self.closers.append(_CLOSERS[ch])
            elif ch in "}]":
                wanted = self.closers.pop() if self.closers else ""
                if wanted not in ("", ch) and self.mismatch is None:
                    self.mismatch = i
                if not self.closers:
                    return i + 1
            elif ch in self.stop_chars:
                return i
        return -1


class ValueEnd:
    """Finds where the JSON object or array opening at `start` ends, in a text that
    only grows: each `scan` carries on from where the last one stopped."""

    def __init__(self, start: int) -> None:
        self.start = start
        self._i = start
        self._scanner = BraceScanner()
        self._end: int | None = None

    def scan(self, text: str) -> int | None:
        """The index just past the value, or None while the text ends before it closes.
        Only brackets and strings are tracked, so a value that closes may still be
        invalid JSON. `Malformed` when it does not open with a bracket or brackets
        mismatch."""
        if self._end is not None:
            return self._end
        if self._i == self.start and self.start < len(text) and text[self.start] not in _CLOSERS:
            raise Malformed(self.start)
        end = self._scanner.scan(text, self._i)
        if self._scanner.mismatch is not None:
            raise Malformed(self._scanner.mismatch)
        self._i = len(text)
        if end < 0:
            return None
        self._end = end
        return end


def value_end(text: str, start: int) -> int | None:
    """One-off `ValueEnd(start).scan(text)`."""
    return ValueEnd(start).scan(text)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _expect(text: str, i: int, ch: str) -> int:
    i = _skip_ws(text, i)
    if i >= len(text) or text[i] != ch:
        raise Malformed(i)
    return i + 1


def _raw_value(text: str, i: int) -> tuple[str, int]:
    i = _skip_ws(text, i)
    try:
        _, end = _DECODER.raw_decode(text, i)
    except ValueError:
        raise Malformed(i) from None
    return text[i:end], end


def _raw_member(text: str, i: int) -> tuple[tuple[str, str], int]:
    key_text, i = _raw_value(text, i)
    key = json.loads(key_text)
    if not isinstance(key, str):
        raise Malformed(i)
    value, i = _raw_value(text, _expect(text, i, ":"))
    return (key, value), i


def _raw_parts(text: str, opener: str, closer: str, read_part: Callable[[str, int], tuple[T, int]]) -> list[T]:
    """The parts of the JSON object or array `text`, each read by `read_part`."""
    parts: list[T] = []
    i = _expect(text, 0, opener)
    if text[_skip_ws(text, i) : _skip_ws(text, i) + 1] == closer:
        i = _skip_ws(text, i) + 1
    else:
        while True:
            part, i = read_part(text, i)
            parts.append(part)
            i = _skip_ws(text, i)
            if text[i : i + 1] == closer:
                i += 1
                break
            i = _expect(text, i, ",")
    if _skip_ws(text, i) != len(text):
        raise Malformed(i)
    return parts


def raw_members(text: str) -> dict[str, str]:
    """The members of the JSON object `text`, each value as its own raw text."""
    return dict(_raw_parts(text, "{", "}", _raw_member))


def raw_elements(text: str) -> list[str]:
    """The elements of the JSON array `text`, each as its own raw text."""
    return _raw_parts(text, "[", "]", _raw_value)


def loads_or_none(text: str) -> Any:
    """json.loads, or None when the text is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def arguments_text(raw: str | None) -> str | None:
    """Arguments JSON from the raw text of an `arguments`/`parameters` member: an
    object keeps its own text; a string holding a JSON object is unwrapped; absent
    or null means no arguments. None when it is anything else."""
    if raw is None:
        return "{}"
    value = loads_or_none(raw)
    if isinstance(value, dict):
        return raw.strip()
    if value is None and raw.strip() == "null":
        return "{}"
    if isinstance(value, str) and isinstance(loads_or_none(value), dict):
        return value.strip()
    return None


def call_list(body: str, name_key: str, arguments_key: str) -> list[tuple[str, str]]:
    """(name, arguments JSON) of each call in a JSON list of call objects (or one
    object), the arguments kept as the model wrote them. Calls without a name or with
    arguments that are not an object are left out; malformed JSON yields none."""
    body = body.strip()
    try:
        entries = raw_elements(body) if body.startswith("[") else [body]
        calls = []
        for entry in entries:
            members = raw_members(entry)
            name = loads_or_none(members.get(name_key, "null"))
            arguments = arguments_text(members.get(arguments_key))
            if isinstance(name, str) and name.strip() and arguments is not None:
                calls.append((name.strip(), arguments))
        return calls
    except (Malformed, ValueError):
        return []
