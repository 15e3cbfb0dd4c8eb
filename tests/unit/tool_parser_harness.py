"""Replaying model output through a streaming tool-call parser, split every way.

`check_stream(parser_cls, text, tools)` feeds `text` split at every character
boundary (one split point at a time) and at random token-like boundaries, and checks:
  - streamed content equals the final parse's content (no markup leaks into it);
  - per call, the first delta has id + name and empty arguments, and the argument
    fragments concatenate exactly to the final parse's arguments;
  - the number of calls and their names match the final parse.
Returns the final ParsedOutput for further assertions.
"""

from __future__ import annotations

import random

from mlxcel.chat.deltas import ParsedDelta, ParsedOutput
from mlxcel.chat.tool_parsers.base import ToolCallParser


def stream(parser_cls: type[ToolCallParser], pieces: list[str], tools=None) -> ParsedDelta:
    parser = parser_cls(tools)
    total = ParsedDelta()
    for piece in pieces:
        total.extend(parser.feed(piece))
    total.extend(parser.finish())
    return total


def _calls_from_deltas(delta: ParsedDelta) -> dict[int, dict]:
    calls: dict[int, dict] = {}
    for d in delta.tool_calls:
        if d.index not in calls:
            assert d.id and d.name, f"first delta of call {d.index} lacks id/name: {d}"
            assert d.arguments == "", f"first delta of call {d.index} carries arguments: {d}"
            calls[d.index] = {"id": d.id, "name": d.name, "arguments": ""}
        else:
            assert d.id in (None, calls[d.index]["id"]) and d.name in (None, calls[d.index]["name"])
            calls[d.index]["arguments"] += d.arguments
    return calls


def _check(parser_cls, pieces, tools, final: ParsedOutput) -> None:
    delta = stream(parser_cls, pieces, tools)
    assert delta.content == final.content, (pieces, delta.content, final.content)
    calls = _calls_from_deltas(delta)
    assert sorted(calls) == list(range(len(final.tool_calls))), (pieces, calls, final.tool_calls)
    for i, call in enumerate(final.tool_calls):
        assert calls[i]["name"] == call.name
        assert calls[i]["arguments"] == call.arguments, (pieces, calls[i]["arguments"], call.arguments)


def random_pieces(text: str, rng: random.Random, max_len: int = 6) -> list[str]:
    pieces, i = [], 0
    while i < len(text):
        n = rng.randint(1, max_len)
        pieces.append(text[i : i + n])
        i += n
    return pieces


def check_stream(parser_cls: type[ToolCallParser], text: str, tools=None, random_rounds: int = 50) -> ParsedOutput:
    final = parser_cls(tools).parse(text)
    _check(parser_cls, [text], tools, final)
    for cut in range(1, len(text)):
        _check(parser_cls, [text[:cut], text[cut:]], tools, final)
    _check(parser_cls, list(text), tools, final)
    rng = random.Random(len(text))
    for _ in range(random_rounds):
        _check(parser_cls, random_pieces(text, rng), tools, final)
    return final
