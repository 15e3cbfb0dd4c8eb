"""Meetkai Functionary v3.1 (Llama 3.1 based):

    <function=get_weather>{"city": "Paris"}</function>

possibly several, after prose; and `<|python_tag|>CODE` for the built-in code
interpreter, sent as a call to `python` with `{"code": CODE}`. Arguments are the
model's JSON text. Calls are sent whole at the end of generation; a block that
does not hold a JSON object is released as written.
"""

from __future__ import annotations

import json
import re

from mlxcel.chat.deltas import ParsedOutput, ToolCall, new_call_id
from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.buffered_parser import BufferedToolParser
from mlxcel.chat.tool_parsers.json_calls import skip_whitespace

FUNCTION, END_FUNCTION, PYTHON_TAG = "<function=", "</function>", "<|python_tag|>"
_HEAD = re.compile(r"<function=([^>\s]+)>")
_DECODER = json.JSONDecoder()


@register
class FunctionaryV31Parser(BufferedToolParser):
    name = "functionary_v3_1"
    detect_priority = 130
    start_markers = (FUNCTION, PYTHON_TAG)

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return FUNCTION in template and "<tool_call>" not in template and "<parameter=" not in template

    def parse(self, text: str) -> ParsedOutput:
        content, calls, at = "", [], 0
        while True:
            start = text.find(FUNCTION, at)
            python = text.find(PYTHON_TAG, at)
            if python >= 0 and (start < 0 or python < start):
                content += text[at:python]
                code = text[python + len(PYTHON_TAG) :].strip()
                if code:
                    calls.append(ToolCall("python", json.dumps({"code": code}, ensure_ascii=False), new_call_id()))
                else:
                    content += text[python:]
                at = len(text)
                break
            if start < 0:
                break
            content += text[at:start]
            call, end = _read_call(text, start)
            if call is None:
                content += text[start:end]
            else:
                calls.append(call)
            at = end
        tail = text[at:]
        content += tail.lstrip() if calls else tail
        return ParsedOutput(content, calls)


def _read_call(text: str, start: int) -> tuple[ToolCall | None, int]:
    """The call whose `<function=` is at `start`, and where its block ends. A block
    that is no call ends at its `</function>` (or the end of the text)."""
    head = _HEAD.match(text, start)
    if head is not None:
        body = skip_whitespace(text, head.end())
        try:
            value, end = _DECODER.raw_decode(text, body)
        except ValueError:
            value, end = None, body
        if isinstance(value, dict):
            call = ToolCall(head.group(1), text[body:end], new_call_id())
            after = skip_whitespace(text, end)
            if text.startswith(END_FUNCTION, after):
                end = after + len(END_FUNCTION)
            return call, end
    close = text.find(END_FUNCTION, start)
    return None, len(text) if close < 0 else close + len(END_FUNCTION)
