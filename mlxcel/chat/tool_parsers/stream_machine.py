"""A base for parsers written as one state machine over the generated text.

The machine consumes `self.buf` a state at a time and reports content, reasoning
and call pieces through the `emit_*` methods. `parse` runs a fresh machine over
the whole text, so the streamed result and the final parse agree by
construction; the machine's decisions must depend only on the text, never on
where it was split (the test harness checks that).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Protocol

from mlxcel.chat.deltas import ParsedDelta, ParsedOutput, ToolCall, ToolCallDelta, new_call_id
from mlxcel.chat.markers import find_first, partial_marker_length
from mlxcel.chat.tool_parsers.base import ToolCallParser
from mlxcel.chat.tool_parsers.json_calls import ReadStep, declared_names, skip_whitespace


class CallReader(Protocol):
    def feed(self, piece: str) -> ReadStep: ...


class StreamMachineParser(ToolCallParser):
    def __init__(self, tools: list[dict] | None = None) -> None:
        super().__init__(tools)
        self.buf = ""
        self.final = False  # set by finish(): nothing more will come
        self._out = ParsedDelta()
        self._calls = 0
        self.trim_content = False  # drop whitespace before content that follows a call
        self.held = ""  # text read for a call that may not become one

    # -- the interface ------------------------------------------------------

    def feed(self, text: str) -> ParsedDelta:
        self.buf += text
        self._advance()
        return self._take()

    def finish(self) -> ParsedDelta:
        self.final = True
        self._advance()
        self.at_end()
        return self._take()

    def parse(self, text: str) -> ParsedOutput:
        machine = type(self)(self.tools)
        delta = machine.feed(text)
        delta.extend(machine.finish())
        return collect(delta)

    # -- for subclasses -------------------------------------------------------

    @abstractmethod
    def step(self) -> bool:
        """Consume from `self.buf` in the current state. True when progress was made
        and another step may make more; False when waiting for more text."""

    def at_end(self) -> None:
        """After the last step of the generation: settle any call left open."""

    def emit_content(self, text: str) -> None:
        self._out.content += text

    def emit_reasoning(self, text: str) -> None:
        self._out.reasoning += text

    def start_call(self, name: str) -> None:
        self._out.tool_calls.append(ToolCallDelta(self._calls, new_call_id(), name, ""))
        self._calls += 1

    def emit_arguments(self, text: str) -> None:
        if not text:
            return
        last = self._out.tool_calls[-1] if self._out.tool_calls else None
        if last is not None and last.index == self._calls - 1 and last.id is None:
            last.arguments += text
        else:
            self._out.tool_calls.append(ToolCallDelta(self._calls - 1, arguments=text))

    def emit_call(self, name: str, arguments: str) -> None:
        self.start_call(name)
        self.emit_arguments(arguments)

    def feed_call_reader(self, reader: CallReader) -> ReadStep:
        """Hand all of `buf` to the reader of the call being read; `buf` keeps only
        what follows the call once it has ended. When the reader knows the name the
        call starts (what was `held` for it is then no content), and the argument
        text it releases is sent on."""
        step = reader.feed(self.buf)
        self.buf = step.rest
        if step.name is not None:
            self.start_call(step.name)
            self.held = ""
        self.emit_arguments(step.arguments)
        return step

    def content_until(self, markers: tuple[str, ...]) -> tuple[int, str | None]:
        """Release `buf` as content up to the first marker, keeping back a possible
        partial marker at its end. Returns where the marker is in the remaining
        `buf` (0) and which one it is, or (-1, None)."""
        if self.trim_content:
            if not self.drop_whitespace():
                return -1, None
            self.trim_content = False
        i, marker = find_first(self.buf, markers)
        if i < 0:
            keep = 0 if self.final else partial_marker_length(self.buf, markers)
            self.emit_content(self.buf[: len(self.buf) - keep])
            self.buf = self.buf[len(self.buf) - keep :]
            return -1, None
        self.emit_content(self.buf[:i])
        self.buf = self.buf[i:]
        return 0, marker

    def drop_whitespace(self) -> bool:
        """Drop leading whitespace; True when something else follows in `buf`."""
        self.buf = self.buf[skip_whitespace(self.buf) :]
        return bool(self.buf)

    def is_declared(self, name: str) -> bool:
        return name in declared_names(self.tools)

    # -- internals ----------------------------------------------------------

    def _advance(self) -> None:
        while self.step():
            pass

    def _take(self) -> ParsedDelta:
        out, self._out = self._out, ParsedDelta()
        return out


def collect(delta: ParsedDelta) -> ParsedOutput:
    """The ParsedOutput a whole run of deltas adds up to."""
    calls: list[ToolCall] = []
    for piece in delta.tool_calls:
        if piece.index == len(calls):
            calls.append(ToolCall(name=piece.name or "", arguments="", id=piece.id or ""))
        calls[piece.index].arguments += piece.arguments
    return ParsedOutput(content=delta.content, tool_calls=calls)
