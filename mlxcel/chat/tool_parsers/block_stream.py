"""A streaming splitter for formats whose calls are sent whole at the end.

The model's text is read as content interrupted by markup: an opening marker, then
a block that runs to its closing. A block is a call (suppressed, turned into calls
at the end), reasoning (streamed as reasoning), skipped markup, or a bare marker
(`drop`) with no body. Content streams as soon as it cannot be the start of an
opening; whitespace next to markup is folded so that content reads as prose.

`parse` runs the same splitter over the whole text in one piece, so streamed content
and the final parse agree however the text was cut.

A format subclass supplies `OPENINGS` (marker -> kind) and `CLOSINGS` (opening
marker -> closing marker), or overrides `find_opening`/`find_closing` for openings
that are patterns, and `calls_from_block` to read its calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from mlxcel.chat.deltas import ParsedDelta, ParsedOutput, ToolCall, ToolCallDelta, new_call_id
from mlxcel.chat.markers import find_first, partial_marker_length
from mlxcel.chat.tool_parsers.base import Tool, ToolCallParser
from mlxcel.chat.tool_parsers.json_spans import ValueEnd

Kind = Literal["call", "reasoning", "skip", "drop"]


@dataclass(frozen=True)
class Opening:
    start: int  # where the opening marker begins
    body_start: int  # where the block's body begins
    kind: Kind
    marker: str = ""  # the opening marker, or a format's own tag for pattern openings
    name: str = ""  # a call name read from the opening, where the format puts it there


@dataclass(frozen=True)
class Block:
    opening: Opening
    body: str
    complete: bool  # False when generation ended inside the block


class BlockStreamParser(ToolCallParser):
    streams_arguments: ClassVar[bool] = False
    OPENINGS: ClassVar[dict[str, Kind]] = {}
    CLOSINGS: ClassVar[dict[str, str]] = {}

    def __init__(self, tools: list[Tool] | None = None) -> None:
        super().__init__(tools)
        self._text = ""
        self._pos = 0
        self._open: Opening | None = None
        self._reasoning_sent = 0
        self._blocks: list[Block] = []
        self._pending_ws = ""  # trailing whitespace of content, held until more content
        self._pending_blocked = False  # markup came after the held whitespace
        self._after_block = False  # whitespace right after markup is held apart
        self._after_ws = ""
        self._emitted = False
        self._done = False
        self._json_scans: dict[int, ValueEnd] = {}

    # ---- format hooks -------------------------------------------------------

    def find_opening(self, text: str, pos: int, final: bool) -> tuple[int, Opening | None]:
        """Scan `text` from `pos` for the next opening: (safe, opening). Content up to
        `safe` is certain; the opening, if any, starts at `safe`. Without one, text
        past `safe` may still begin an opening and is held (unless `final`)."""
        index, marker = find_first(text, self.OPENINGS, pos)
        if marker is not None:
            return index, Opening(index, index + len(marker), self.OPENINGS[marker], marker)
        if final:
            return len(text), None
        return len(text) - partial_marker_length(text[pos:], self.OPENINGS), None

    def find_closing(self, opening: Opening, text: str, final: bool) -> tuple[int, int] | None:
        """Where the open block ends: (body_end, resume), or None while undecided."""
        closing = self.CLOSINGS[opening.marker]
        index = text.find(closing, opening.body_start)
        if index < 0:
            return None
        return index, index + len(closing)

    def json_value_end(self, text: str, start: int) -> int | None:
        """Where the JSON object or array opening at `text[start]` ends (None while it
        has not closed; `Malformed` when it cannot); resumes earlier scans."""
        if start not in self._json_scans:
            self._json_scans[start] = ValueEnd(start)
        return self._json_scans[start].scan(text)

    def calls_from_block(self, block: Block) -> list[tuple[str, str]]:
        """The (name, arguments JSON) of each call a call block holds."""
        raise NotImplementedError

    # ---- the interface ------------------------------------------------------

    def feed(self, text: str) -> ParsedDelta:
        self._text += text
        return self._advance(final=False)

    def finish(self) -> ParsedDelta:
        if self._done:
            return ParsedDelta()
        out = self._advance(final=True)
        for index, call in enumerate(self._calls()):
            out.tool_calls.append(ToolCallDelta(index=index, id=call.id, name=call.name))
            out.tool_calls.append(ToolCallDelta(index=index, arguments=call.arguments))
        return out

    def parse(self, text: str) -> ParsedOutput:
        scanner = type(self)(self.tools)
        scanner._text = text
        out = scanner._advance(final=True)
        return ParsedOutput(content=out.content, tool_calls=scanner._calls())

    # ---- the splitter -------------------------------------------------------

    def _calls(self) -> list[ToolCall]:
        calls = []
        for block in self._blocks:
            if block.opening.kind == "call":
                for name, arguments in self.calls_from_block(block):
                    calls.append(ToolCall(name=name, arguments=arguments, id=new_call_id()))
        return calls

    def _advance(self, final: bool) -> ParsedDelta:
        out = ParsedDelta()
        if self._done:
            return out
        text = self._text
        while True:
            if self._open is None:
                safe, opening = self.find_opening(text, self._pos, final)
                self._content(text[self._pos : safe], out)
                self._pos = safe
                if opening is None:
                    break
                self._begin(opening)
                continue
            opening = self._open
            if opening.kind == "drop":
                self._end(Block(opening, "", True), opening.body_start)
                continue
            closing = self.find_closing(opening, text, final)
            if closing is None and not final:
                self._stream_reasoning(opening, len(text), out, holding=True)
                break
            body_end, resume = closing if closing else (len(text), len(text))
            self._stream_reasoning(opening, body_end, out, holding=False)
            self._end(Block(opening, text[opening.body_start : body_end], closing is not None), resume)
        if final:
            if self._pending_ws and not self._pending_blocked:
                out.content += self._pending_ws
            self._pending_ws = ""
            self._done = True
        return out

    def _begin(self, opening: Opening) -> None:
        if not self._emitted:
            self._pending_ws = ""
        self._pending_blocked = True
        self._open = opening
        self._reasoning_sent = opening.body_start

    def _end(self, block: Block, resume: int) -> None:
        self._blocks.append(block)
        self._open = None
        self._pos = resume
        self._after_block, self._after_ws = True, ""

    def _stream_reasoning(self, opening: Opening, end: int, out: ParsedDelta, holding: bool) -> None:
        if opening.kind != "reasoning":
            return
        if holding:
            tail = self._text[self._reasoning_sent : end]
            end -= partial_marker_length(tail, [self.CLOSINGS.get(opening.marker, "")])
        if end > self._reasoning_sent:
            out.reasoning += self._text[self._reasoning_sent : end]
            self._reasoning_sent = end

    def _content(self, piece: str, out: ParsedDelta) -> None:
        if self._after_block:
            body = piece.lstrip()
            self._after_ws += piece[: len(piece) - len(body)]
            if not body:
                return
            # content resumes: one run of whitespace separates it from what came before
            if self._emitted and not self._pending_ws:
                self._pending_ws = self._after_ws
            self._after_block, self._after_ws, piece = False, "", body
        if not piece:
            return
        body = piece.rstrip()
        if not body:
            self._pending_ws += piece
            return
        out.content += self._pending_ws + body
        self._pending_ws = piece[len(body) :]
        self._pending_blocked = False
        self._emitted = True


def prefix_state(text: str, i: int, literal: str) -> Literal["yes", "partial", "no"]:
    """Whether `text[i:]` starts with `literal` ("yes"), ends while still matching it
    ("partial"), or departs from it ("no")."""
    rest = text[i : i + len(literal)]
    if rest == literal:
        return "yes"
    return "partial" if literal.startswith(rest) else "no"
