"""The chat output pipeline: reasoning split first, then tool-call parsing, streamed;
and the authoritative end-of-generation parse that streamed calls are reconciled with."""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field

from mlxcel.chat.deltas import ParsedDelta, ToolCall, ToolCallDelta, new_call_id
from mlxcel.chat.reasoning import THINK, ReasoningMarkers, ReasoningSplitter, split_reasoning_extent
from mlxcel.chat.tool_parsers.base import ToolCallParser

log = logging.getLogger("mlxcel.chat")


@dataclass
class _StreamedCall:
    id: str
    name: str
    arguments: str = ""


@dataclass
class FinalChat:
    content: str
    reasoning: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning_tokens: int = 0  # generated tokens that make up the reasoning block, its markers included


class ChatOutputParser:
    def __init__(
        self,
        *,
        parse_reasoning: bool,
        start_in_reasoning: bool,
        tool_parser_cls: type[ToolCallParser] | None,
        tools: list[dict],
        request_id: str = "",
        markers: ReasoningMarkers = THINK,
        max_tool_calls: int | None = None,
    ) -> None:
        self._reasoning = parse_reasoning
        self._start_in_reasoning = start_in_reasoning
        self._markers = markers
        self._splitter = ReasoningSplitter(start_in_reasoning, markers.open, markers.close) if parse_reasoning else None
        self._tool_parser_cls = tool_parser_cls if tools else None
        self._tools = tools
        self._tool_parser = self._tool_parser_cls(tools) if self._tool_parser_cls else None
        self._streamed: dict[int, _StreamedCall] = {}
        self._text: list[str] = []
        self._chars = 0  # characters of text taken so far
        self._token_starts: list[int] = []  # where each generated token's text starts in it
        self._request_id = request_id
        # at most this many calls (None: any): a call past them ends the output where it
        # begins; `over_limit` then says the generation should stop
        self._max_calls = max_tool_calls if self._tool_parser_cls else None
        self.over_limit = False
        self._content_before: list[str] = []  # the content streamed before such a call

    def feed(self, text: str, token: bool = True) -> ParsedDelta:
        """Parse the next piece: a generated token's text, or (`token=False`) text that
        no token of this generation produced (a continued message, released held-back text)."""
        self._take(text, [len(text)] if token else [])
        delta = self._route(self._splitter.feed(text) if self._splitter else ParsedDelta(content=text))
        return self._limited(delta) if self._max_calls is not None else delta

    def _limited(self, delta: ParsedDelta) -> ParsedDelta:
        """Nothing from the first call past the limit on: what came before it stays."""
        if self.over_limit:
            return ParsedDelta()
        if any(call.index >= self._max_calls for call in delta.tool_calls):
            self.over_limit = True
            delta.tool_calls = [call for call in delta.tool_calls if call.index < self._max_calls]
        self._content_before.append(delta.content)
        return delta

    def finish(self) -> ParsedDelta:
        out = ParsedDelta()
        if self.over_limit:
            return out  # held-back text belongs to the call past the limit
        if self._splitter:
            out.extend(self._route(self._splitter.finish()))
        if self._tool_parser:
            out.extend(self._track(self._tool_parser.finish()))
        return self._limited(out) if self._max_calls is not None else out

    def _route(self, delta: ParsedDelta) -> ParsedDelta:
        if self._tool_parser is None or not delta.content:
            return delta
        parsed = self._track(self._tool_parser.feed(delta.content))
        return ParsedDelta(content=parsed.content, reasoning=delta.reasoning, tool_calls=parsed.tool_calls)

    def _track(self, delta: ParsedDelta) -> ParsedDelta:
        for call in delta.tool_calls:
            if call.index not in self._streamed:
                self._streamed[call.index] = _StreamedCall(call.id or new_call_id(), call.name or "")
                call.id = self._streamed[call.index].id
            else:
                self._streamed[call.index].arguments += call.arguments
        return delta

    def add_text(self, text: str, token_lengths: list[int] = ()) -> None:
        """Take a whole generation without the streaming parse (only `final` follows);
        `token_lengths` are the lengths of its tokens' texts, in order."""
        self._take(text, token_lengths)

    def _take(self, text: str, token_lengths) -> None:
        self._text.append(text)
        start = self._chars
        for n in token_lengths:
            self._token_starts.append(start)
            start += n
        self._chars += len(text)

    def final(self) -> tuple[FinalChat, list[ToolCallDelta]]:
        """The authoritative parse of everything generated, and the tool-call deltas
        still owed to a stream so its calls end up equal to that parse."""
        text = "".join(self._text)
        if self._reasoning:
            reasoning, content, extent = split_reasoning_extent(text, self._start_in_reasoning,
                                                                self._markers.open, self._markers.close)
        else:
            reasoning, content, extent = "", text, 0
        calls: list[ToolCall] = []
        if self._tool_parser_cls is not None:
            parsed = self._tool_parser_cls(self._tools).parse(content)
            content, calls = parsed.content, parsed.tool_calls
            if self._max_calls is not None:
                calls = calls[: self._max_calls]
                if self.over_limit:  # a stream cut short: the call past the limit may be unfinished
                    content = "".join(self._content_before)
        owed: list[ToolCallDelta] = []
        for index, call in enumerate(calls):
            streamed = self._streamed.get(index)
            if streamed is None:
                call.id = call.id or new_call_id()
                owed.append(ToolCallDelta(index, id=call.id, name=call.name, arguments=""))
                owed.append(ToolCallDelta(index, arguments=call.arguments))
                continue
            call.id = streamed.id
            if streamed.name != call.name or not call.arguments.startswith(streamed.arguments):
                log.warning(
                    "request %s: streamed tool call %d (%s %r) disagrees with the final parse (%s %r)",
                    self._request_id, index, streamed.name, streamed.arguments, call.name, call.arguments,
                )
            elif len(call.arguments) > len(streamed.arguments):
                owed.append(ToolCallDelta(index, arguments=call.arguments[len(streamed.arguments):]))
        reasoning_tokens = bisect.bisect_left(self._token_starts, extent)
        return FinalChat(content=content, reasoning=reasoning, tool_calls=calls,
                         reasoning_tokens=reasoning_tokens), owed
