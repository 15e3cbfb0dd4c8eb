"""Reading JSON tool-call objects, whole or as they stream.

A call object looks like `{"name": N, "arguments": {...}}` (Llama says
`"parameters"`). While it streams, `JsonCallReader` reports the name as soon as
the head `{"name": "N", "arguments": ` is complete, then hands out the argument
object's own text as it arrives, so the fragments concatenate to exactly the
model's JSON. Objects in another shape (arguments first, string arguments) are
read whole and judged once they close.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from mlxcel.chat.tool_parsers.json_spans import BraceScanner, Malformed, loads_or_none, raw_members

ARGUMENT_KEYS = ("arguments", "parameters")
HEAD_KEYS = ("name", "type", "id")  # string members that may come before the arguments

_WHITESPACE = re.compile(r"\s*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def skip_whitespace(text: str, i: int = 0) -> int:
    return _WHITESPACE.match(text, i).end()  # type: ignore[union-attr]


@dataclass
class CallHead:
    name: str
    args_start: int  # index of the "{" that opens the arguments object


MORE = "more"  # the head is not complete yet
NO_HEAD = "no"  # this object does not start in the streamable shape


def read_call_head(text: str) -> CallHead | str:
    """Match `{"name": "N", "arguments": {` at the start of `text` ("type" and "id"
    strings may come before the arguments too). Returns the head, MORE when `text`
    may still grow into one, or NO_HEAD."""
    i = skip_whitespace(text)
    if i == len(text):
        return MORE
    if text[i] != "{":
        return NO_HEAD
    i += 1
    name: str | None = None
    while True:
        i = skip_whitespace(text, i)
        if i == len(text):
            return MORE
        if text[i] != '"':
            return NO_HEAD
        key, i = _read_string(text, i)
        if key is None:
            return MORE if i < 0 else NO_HEAD
        i = skip_whitespace(text, i)
        if i == len(text):
            return MORE
        if text[i] != ":":
            return NO_HEAD
        i = skip_whitespace(text, i + 1)
        if i == len(text):
            return MORE
        if key in ARGUMENT_KEYS:
            return CallHead(name, i) if name and text[i] == "{" else NO_HEAD
        if key not in HEAD_KEYS or text[i] != '"':
            return NO_HEAD
        value, i = _read_string(text, i)
        if value is None:
            return MORE if i < 0 else NO_HEAD
        if key == "name":
            name = value
        i = skip_whitespace(text, i)
        if i == len(text):
            return MORE
        if text[i] != ",":
            return NO_HEAD
        i += 1


def _read_string(text: str, i: int) -> tuple[str | None, int]:
    """The JSON string at `i`: (value, end), (None, -1) if unterminated so far,
    (None, i) if invalid."""
    match = _STRING.match(text, i)
    if match is None:
        return None, -1
    try:
        return json.loads(match.group()), match.end()
    except ValueError:
        return None, i


def parse_call_object(text: str) -> tuple[str, str] | None:
    """(name, arguments JSON text) from a complete call object, or None.
    Object arguments keep their own text; string arguments are taken as given;
    an OpenAI-style {"function": {...}} wrapper is looked through."""
    try:
        members = raw_members(text.strip())
    except Malformed:
        return None
    if "name" not in members and members.get("function", "").startswith("{"):
        return parse_call_object(members["function"])
    name = loads_or_none(members.get("name", "null"))
    if not isinstance(name, str) or not name:
        return None
    for key in ARGUMENT_KEYS:
        if key in members:
            value = json.loads(members[key])
            if isinstance(value, dict):
                return name, members[key]
            if isinstance(value, str):
                return name, value
            if value is None:
                return name, "{}"
            return None
    return name, "{}"


@dataclass
class ReadStep:
    """What one `JsonCallReader.feed` learned."""

    name: str | None = None  # set once, when the call is known
    arguments: str = ""  # argument text released by this step
    done: bool = False  # the object has ended; `rest` is the text after it
    invalid: bool = False  # it ended and is no call; `raw` is its text
    rest: str = ""
    raw: str = ""


class JsonCallReader:
    """Reads one call object from text fed piece by piece, starting at its "{".

    `accept_name` decides which names make a call (e.g. only declared tools for
    formats without a wrapper). `stop_chars` end an object that will never close
    (a missing brace before the closing tag). With `strict_head`, an object that
    does not start like a call is given up at once, only its "{" consumed, so
    untagged JSON that is no call is not held back until it closes."""

    def __init__(
        self, accept_name: Callable[[str], bool] | None = None, stop_chars: str = "<", strict_head: bool = False
    ) -> None:
        self.accept_name = accept_name or (lambda name: True)
        self.stop_chars = stop_chars
        self.strict_head = strict_head
        self.text = ""
        self.phase = "head"  # head -> args -> tail, or head -> whole
        self.started = False  # a name has been handed out
        self.scanner = BraceScanner(stop_chars=stop_chars)
        self.pos = 0  # how far `text` has been scanned
        self.args_sent = 0  # index in `text` up to which arguments were released

    def feed(self, piece: str) -> ReadStep:
        self.text += piece
        step = ReadStep()
        if self.phase == "head":
            head = read_call_head(self.text)
            if head == MORE:
                return step
            if isinstance(head, CallHead) and self.accept_name(head.name):
                step.name = head.name
                self.started = True
                self.phase = "args"
                self.pos = self.args_sent = head.args_start
            elif head == NO_HEAD and self.strict_head:
                start = self.text.index("{") + 1
                step.invalid, step.raw, step.rest = True, self.text[:start], self.text[start:]
                return step
            else:
                self.phase = "whole"
        if self.phase == "args":
            end = self.scanner.scan(self.text, self.pos)
            upto = len(self.text) if end < 0 else end
            step.arguments = self.text[self.args_sent : upto]
            # released text is not needed again: keep only what follows it
            self.text, self.pos, self.args_sent = self.text[upto:], 0, 0
            if end < 0:
                return step
            self.phase = "tail"
            self.scanner = BraceScanner(depth=1, stop_chars=self.stop_chars)
        if self.phase == "tail":
            end = self.scanner.scan(self.text, self.pos)
            if end < 0:
                self.pos = len(self.text)
                return step
            step.done, step.rest = True, self.text[end:]
            return step
        end = self.scanner.scan(self.text, self.pos)
        if end < 0:
            self.pos = len(self.text)
            return step
        parsed = parse_call_object(self.text[:end])
        if parsed is not None and self.accept_name(parsed[0]):
            step.name, step.arguments = parsed
            self.started = True
            step.done, step.rest = True, self.text[end:]
        else:
            step.invalid, step.raw, step.rest = True, self.text[:end], self.text[end:]
        return step


SCHEMA_DATA_KEYWORDS = ("const", "enum", "default", "examples")  # values that are data, not schemas
SCHEMA_NAME_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")  # name -> schema


def _rebased(schema: object, base: str) -> object:
    """`schema` embedded at the JSON pointer `base` of a larger one: each local `$ref`
    ("#/$defs/City") points into it there ("#<base>/$defs/City"), as it did at its root.
    A subschema with its own `$id` is a resource its refs already resolve within."""
    if isinstance(schema, list):
        return [_rebased(item, base) for item in schema]
    if not isinstance(schema, dict) or "$id" in schema:
        return schema
    rebased = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str) and (value == "#" or value.startswith("#/")):
            rebased[key] = "#" + base + value[1:]  # an anchor ("#node") is found wherever it is
        elif key in SCHEMA_DATA_KEYWORDS:
            rebased[key] = value
        elif key in SCHEMA_NAME_MAPS and isinstance(value, dict):
            rebased[key] = {name: _rebased(item, base) for name, item in value.items()}
        else:
            rebased[key] = _rebased(value, base)
    return rebased


def call_object_schema(tools: list[dict], args_key: str = "arguments") -> dict:
    """JSON Schema of one call object to any of `tools`; each tool's parameters keep
    their local `$ref`s (`$defs`, `definitions`) resolving as in the tool alone."""
    variants = []
    for n, tool in enumerate(tools):
        function = tool.get("function", tool)
        at = f"/properties/{args_key}" if len(tools) == 1 else f"/anyOf/{n}/properties/{args_key}"
        variants.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": function["name"]},
                    args_key: _rebased(function.get("parameters") or {"type": "object"}, at),
                },
                "required": ["name", args_key],
            }
        )
    return variants[0] if len(variants) == 1 else {"anyOf": variants}


def declared_names(tools: list[dict]) -> set[str]:
    return {tool.get("function", tool).get("name") for tool in tools} - {None}
