"""Kimi K2 calls:

    <|tool_calls_section_begin|>
    <|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>
    <|tool_calls_section_end|>

The call id written by the model (`functions.NAME:INDEX`) gives the name; the
arguments are the model's JSON text. A section with no readable call is
released as written. Calls are sent whole at the end of generation.
"""

from __future__ import annotations

import json
import re

from mlxcel.chat.deltas import ParsedOutput, ToolCall, new_call_id
from mlxcel.chat.markers import find_first
from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.buffered_parser import BufferedToolParser

SECTION_BEGINS = ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>")
SECTION_ENDS = ("<|tool_calls_section_end|>", "<|tool_call_section_end|>")
CALL_BEGIN, ARGUMENT_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_CALL = re.compile(
    re.escape(CALL_BEGIN) + r"\s*(?:functions\.)?([\w.\-]+?)(?::\d+)?\s*" + re.escape(ARGUMENT_BEGIN)
    + r"(.*?)(?:" + re.escape(CALL_END) + "|(?=" + re.escape(CALL_BEGIN) + r")|\Z)",
    re.DOTALL,
)


@register
class KimiK2Parser(BufferedToolParser):
    name = "kimi_k2"
    detect_priority = 60
    start_markers = SECTION_BEGINS + (CALL_BEGIN,)

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return any(marker in template for marker in SECTION_BEGINS) or CALL_BEGIN in template

    def parse(self, text: str) -> ParsedOutput:
        content, calls, at = "", [], 0
        while True:
            start, marker = find_first(text, self.start_markers, at)
            if marker is None:
                break
            content += text[at:start]
            body_from = start + len(marker)
            if marker == CALL_BEGIN:  # a call without the section around it
                body_from = start
            end, end_marker = find_first(text, SECTION_ENDS, body_from)
            after = len(text) if end_marker is None else end + len(end_marker)
            found = _section_calls(text[body_from : len(text) if end_marker is None else end])
            if found:
                calls += found
            else:
                content += text[start:after]
            at = after
        tail = text[at:]
        content += tail.lstrip() if calls else tail
        return ParsedOutput(content, calls)


def _section_calls(body: str) -> list[ToolCall]:
    calls = []
    for match in _CALL.finditer(body):
        arguments = match.group(2).strip() or "{}"
        try:
            json.loads(arguments)
        except ValueError:
            continue
        calls.append(ToolCall(match.group(1), arguments, new_call_id()))
    return calls
