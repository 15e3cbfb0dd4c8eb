"""Gemma's loose call syntax: `call:NAME{key:value,...}`.

Keys are bare words; a string value sits between two copies of a quote token
(`<|"|>` for Gemma 4, `<escape>` for function-calling Gemma) with nothing escaped
inside; objects are `{k:v,...}`, arrays `[v,...]`; numbers, booleans and null are
bare. Bare values are coerced against the tool's schema, as are quoted ones when the
schema wants something other than a string.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from mlxcel.chat.tool_parsers.block_stream import Block, BlockStreamParser, Opening
from mlxcel.chat.tool_parsers.coercion import arguments_json, coerce_value, items_schema, property_schema, schema_types

CALL_PREFIX = "call:"
_NAME = re.compile(r"\s*call:\s*([^\s{]+)\s*\{")


class GemmaSyntaxError(ValueError):
    pass


class _Reader:
    def __init__(self, text: str, quote: str) -> None:
        self.text = text
        self.quote = quote
        self.i = 0

    def skip(self) -> None:
        while self.i < len(self.text) and self.text[self.i] in " \t\r\n":
            self.i += 1

    def peek(self) -> str:
        self.skip()
        if self.i >= len(self.text):
            raise GemmaSyntaxError("unexpected end")
        return self.text[self.i]

    def quoted(self) -> str:
        start = self.i + len(self.quote)
        end = self.text.find(self.quote, start)
        if end < 0:
            raise GemmaSyntaxError("unterminated string")
        self.i = end + len(self.quote)
        return self.text[start:end]

    def value(self, schema: dict | None) -> Any:
        self.skip()
        if self.text.startswith(self.quote, self.i):
            raw = self.quoted()
            wanted = schema_types(schema)
            return raw if not wanted or "string" in wanted else coerce_value(raw, schema)
        ch = self.peek()
        if ch == "{":
            return self.mapping(schema)
        if ch == "[":
            return self.sequence(schema)
        start = self.i
        while self.i < len(self.text) and self.text[self.i] not in ",}]":
            if self.text.startswith(self.quote, self.i):
                raise GemmaSyntaxError("quote inside a bare value")
            self.i += 1
        return coerce_value(self.text[start : self.i].strip(), schema)

    def key(self) -> str:
        self.skip()
        if self.text.startswith(self.quote, self.i):
            key = self.quoted()
        else:
            colon = self.text.find(":", self.i)
            if colon < 0:
                raise GemmaSyntaxError("key without value")
            key = self.text[self.i : colon].strip().strip("\"'")
            self.i = colon
        if self.peek() != ":":
            raise GemmaSyntaxError("expected ':'")
        self.i += 1
        return key

    def mapping(self, schema: dict | None) -> dict[str, Any]:
        self.i += 1  # '{'
        result: dict[str, Any] = {}
        while self.peek() != "}":
            key = self.key()
            result[key] = self.value(property_schema(schema, key))
            if self.peek() == ",":
                self.i += 1
            elif self.peek() != "}":
                raise GemmaSyntaxError("expected ',' or '}'")
        self.i += 1
        return result

    def sequence(self, schema: dict | None) -> list[Any]:
        self.i += 1  # '['
        result: list[Any] = []
        while self.peek() != "]":
            result.append(self.value(items_schema(schema)))
            if self.peek() == ",":
                self.i += 1
            elif self.peek() != "]":
                raise GemmaSyntaxError("expected ',' or ']'")
        self.i += 1
        return result


def parse_call(body: str, quote: str, schema_of: Any) -> tuple[str, dict[str, Any]] | None:
    """(name, arguments) of a `call:NAME{...}` body, or None when it is not one.
    `schema_of(name)` gives the tool's parameter schema."""
    match = _NAME.match(body)
    if not match:
        return None
    name = match.group(1)
    reader = _Reader(body, quote)
    reader.i = match.end() - 1
    try:
        arguments = reader.mapping(schema_of(name))
    except GemmaSyntaxError:
        return None
    if body[reader.i :].strip():
        return None
    return name, arguments


def closing_outside_strings(text: str, start: int, closing: str, quote: str) -> int:
    """Index of the first `closing` at or after `start` that is not inside a quoted
    string, or -1 when the text ends first."""
    i = start
    while True:
        end = text.find(closing, i)
        open_quote = text.find(quote, i)
        if open_quote < 0 or (0 <= end < open_quote):
            return end
        close_quote = text.find(quote, open_quote + len(quote))
        if close_quote < 0:
            return -1
        i = close_quote + len(quote)


class GemmaCallParser(BlockStreamParser):
    """One `call:NAME{...}` per call block; markers and quote token set by subclasses."""

    QUOTE: ClassVar[str] = ""

    def find_closing(self, opening: Opening, text: str, final: bool) -> tuple[int, int] | None:
        closing = self.CLOSINGS[opening.marker]
        end = closing_outside_strings(text, opening.body_start, closing, self.QUOTE)
        return None if end < 0 else (end, end + len(closing))

    def calls_from_block(self, block: Block) -> list[tuple[str, str]]:
        call = parse_call(block.body, self.QUOTE, self.tool_schema)
        return [] if call is None else [(call[0], arguments_json(call[1]))]
