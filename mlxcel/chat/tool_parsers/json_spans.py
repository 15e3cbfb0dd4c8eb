"""Finding where JSON values end, and the model's own text of their parts.

Calls written as JSON keep the model's text for object arguments (key order,
spacing, number forms), so these helpers hand back raw slices rather than
re-serialised values.
"""

from __future__ import annotations

import json
from typing import Any

_DECODER = json.JSONDecoder()
_CLOSERS = {"{": "}", "[": "]"}


class Malformed(ValueError):
    """The text cannot be the JSON value it started as; `at` is where that showed."""

    def __init__(self, at: int) -> None:
        super().__init__(f"malformed JSON at {at}")
        self.at = at


class ValueEnd:
    """Finds where the JSON object or array opening at `start` ends, in a text that
    only grows: each `scan` carries on from where the last one stopped."""

    def __init__(self, start: int) -> None:
        self.start = start
        self._i = start
        self._stack: list[str] = []
        self._in_string = self._escaped = False
        self._end: int | None = None
        self._malformed: int | None = None

    def scan(self, text: str) -> int | None:
        """The index just past the value, or None while the text ends before it closes.
        Only brackets and strings are tracked, so a value that closes may still be
        invalid JSON. `Malformed` when it does not open with a bracket or brackets
        mismatch."""
        if self._end is not None:
            return self._end
        if self._i == self.start and self.start < len(text) and text[self.start] not in _CLOSERS:
            self._malformed = self.start
        if self._malformed is not None:
            raise Malformed(self._malformed)
        for i in range(self._i, len(text)):
            ch = text[i]
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == '"':
                    self._in_string = False
            elif ch == '"':
                self._in_string = True
            elif ch in _CLOSERS:
                self._stack.append(_CLOSERS[ch])
            elif ch in "}]":
                if not self._stack or self._stack.pop() != ch:
                    self._malformed = i
                    raise Malformed(i)
                if not self._stack:
                    self._end = i + 1
                    return self._end
        self._i = len(text)
        return None


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


def raw_members(text: str) -> dict[str, str]:
    """The members of the JSON object `text`, each value as its own raw text."""
    members: dict[str, str] = {}
    i = _expect(text, 0, "{")
    if text[_skip_ws(text, i) : _skip_ws(text, i) + 1] == "}":
        i = _skip_ws(text, i) + 1
    else:
        while True:
            key_text, i = _raw_value(text, i)
            key = json.loads(key_text)
            if not isinstance(key, str):
                raise Malformed(i)
            i = _expect(text, i, ":")
            members[key], i = _raw_value(text, i)
            i = _skip_ws(text, i)
            if text[i : i + 1] == "}":
                i += 1
                break
            i = _expect(text, i, ",")
    if _skip_ws(text, i) != len(text):
        raise Malformed(i)
    return members


def raw_elements(text: str) -> list[str]:
    """The elements of the JSON array `text`, each as its own raw text."""
    elements: list[str] = []
    i = _expect(text, 0, "[")
    if text[_skip_ws(text, i) : _skip_ws(text, i) + 1] == "]":
        i = _skip_ws(text, i) + 1
    else:
        while True:
            element, i = _raw_value(text, i)
            elements.append(element)
            i = _skip_ws(text, i)
            if text[i : i + 1] == "]":
                i += 1
                break
            i = _expect(text, i, ",")
    if _skip_ws(text, i) != len(text):
        raise Malformed(i)
    return elements


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
