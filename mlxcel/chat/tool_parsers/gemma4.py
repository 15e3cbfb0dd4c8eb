"""Gemma 4: `<|tool_call>call:NAME{key:value,...}<tool_call|>`.

    Let me check.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

One call per block, in Gemma's loose object syntax with `<|"|>` around strings (see
`gemma_syntax`); arguments are turned into JSON. A tool response the model writes
itself (`<|tool_response>...<tool_response|>`) is dropped.
"""

from __future__ import annotations

from typing import ClassVar

from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.block_stream import Kind
from mlxcel.chat.tool_parsers.gemma_syntax import GemmaCallParser

START, END = "<|tool_call>", "<tool_call|>"


@register
class Gemma4Parser(GemmaCallParser):
    name = "gemma4"
    detect_priority = 100
    QUOTE: ClassVar[str] = '<|"|>'
    OPENINGS: ClassVar[dict[str, Kind]] = {START: "call", "<|tool_response>": "skip"}
    CLOSINGS: ClassVar[dict[str, str]] = {START: END, "<|tool_response>": "<tool_response|>"}

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return START in template and "call:" in template
