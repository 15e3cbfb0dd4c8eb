"""Function-calling Gemma: `<start_function_call>call:NAME{...}<end_function_call>`.

    <start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>

Gemma's loose object syntax with `<escape>` around strings (see `gemma_syntax`);
arguments are turned into JSON. A function response the model writes itself is dropped.
"""

from __future__ import annotations

from typing import ClassVar

from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.block_stream import Kind
from mlxcel.chat.tool_parsers.gemma_syntax import GemmaCallParser

START, END = "<start_function_call>", "<end_function_call>"


@register
class FunctionGemmaParser(GemmaCallParser):
    name = "function_gemma"
    detect_priority = 110
    QUOTE: ClassVar[str] = "<escape>"
    OPENINGS: ClassVar[dict[str, Kind]] = {START: "call", "<start_function_response>": "skip"}
    CLOSINGS: ClassVar[dict[str, str]] = {START: END, "<start_function_response>": "<end_function_response>"}

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return START in template
