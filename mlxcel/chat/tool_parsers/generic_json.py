"""Generic JSON replies, for templates with no call syntax of their own:

    {"name": "get_weather", "arguments": {"city": "Paris"}}
    {"tool_calls": [{"name": ..., "arguments": ...}, ...]}   (or "tool_call": {...})
    {"response": "plain answer"}                             (content)

optionally inside a ```json fence. Names must be declared tools; anything else
is content as written. Calls are sent whole at the end of generation.
"""

from __future__ import annotations

import re

from mlxcel.chat.deltas import ParsedOutput, ToolCall, new_call_id
from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.buffered_parser import BufferedToolParser
from mlxcel.chat.tool_parsers.json_calls import parse_call_object
from mlxcel.chat.tool_parsers.json_spans import Malformed, loads_or_none, raw_elements, raw_members

_FENCED = re.compile(r"```[ \t]*(?:json)?[ \t]*\r?\n(.*?)\r?\n?[ \t]*```", re.DOTALL)


@register
class GenericJsonParser(BufferedToolParser):
    name = "generic_json"
    detect_priority = 190
    reply_openers = "{`"

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return False  # the fallback format: chosen by name, never sniffed

    def parse(self, text: str) -> ParsedOutput:
        body = text.strip()
        fenced = _FENCED.fullmatch(body)
        if fenced:
            body = fenced.group(1).strip()
        try:
            members = raw_members(body)
        except Malformed:
            return ParsedOutput(content=text)
        response = loads_or_none(members.get("response", "null"))
        if isinstance(response, str) and len(members) == 1:
            return ParsedOutput(content=response)
        if "tool_calls" in members or "tool_call" in members:
            raw = members.get("tool_calls") or members["tool_call"]
            items = [raw] if raw.startswith("{") else raw_elements(raw) if raw.startswith("[") else []
        else:
            items = [body]
        calls = [call for call in map(parse_call_object, items) if call and self.is_declared(call[0])]
        if not calls or len(calls) != len(items):
            return ParsedOutput(content=text)
        return ParsedOutput("", [ToolCall(name, arguments, new_call_id()) for name, arguments in calls])

