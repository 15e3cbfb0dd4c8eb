"""A base for formats whose calls are sent whole at the end of generation.

Content streams until the first place tool-call markup may begin; from there
everything is held, and `finish` releases what the whole-text `parse` finds:
the rest of its content and each call as one start chunk plus one arguments
chunk. `parse` must keep the text before the first markup as the start of its
content, so what was streamed is always a prefix of the final content.
"""

from __future__ import annotations

from typing import ClassVar

from mlxcel.chat.deltas import ParsedDelta, ToolCallDelta, new_call_id
from mlxcel.chat.markers import find_first, partial_marker_length
from mlxcel.chat.tool_parsers.base import ToolCallParser
from mlxcel.chat.tool_parsers.json_calls import declared_names


class BufferedToolParser(ToolCallParser):
    streams_arguments = False
    #: markers that open tool-call markup anywhere in the text
    start_markers: ClassVar[tuple[str, ...]] = ()
    #: a reply whose first non-space character is one of these may be a call
    reply_openers: ClassVar[str] = ""

    def __init__(self, tools: list[dict] | None = None) -> None:
        super().__init__(tools)
        self.text = ""
        self.sent = 0  # characters of `text` released as content
        self.holding = False  # markup (maybe) found: hold everything until finish
        self.opening_seen = not self.reply_openers  # the reply's first character is known

    def feed(self, text: str) -> ParsedDelta:
        self.text += text
        if self.holding:
            return ParsedDelta()
        if not self.opening_seen:
            stripped = self.text.lstrip()
            if not stripped:
                return ParsedDelta()
            self.opening_seen = True
            if stripped[0] in self.reply_openers:
                self.holding = True
                return ParsedDelta()
        longest = max((len(m) for m in self.start_markers), default=0)
        at, _ = find_first(self.text, self.start_markers, max(0, self.sent - longest))
        if at >= 0:
            safe, self.holding = at, True
        else:
            safe = len(self.text) - partial_marker_length(self.text, self.start_markers)
        out = ParsedDelta(content=self.text[self.sent : safe])
        self.sent = max(self.sent, safe)
        return out

    def finish(self) -> ParsedDelta:
        final = self.parse(self.text)
        sent = self.text[: self.sent]
        if not final.content.startswith(sent):  # cannot happen when parse keeps its promise
            raise AssertionError(f"{self.name}: streamed content is not a prefix of the parse")
        out = ParsedDelta(content=final.content[len(sent) :])
        for index, call in enumerate(final.tool_calls):
            out.tool_calls.append(ToolCallDelta(index, call.id or new_call_id(), call.name, ""))
            if call.arguments:
                out.tool_calls.append(ToolCallDelta(index, arguments=call.arguments))
        return out

    def is_declared(self, name: str) -> bool:
        return name in declared_names(self.tools)
