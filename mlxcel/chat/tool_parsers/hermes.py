"""Hermes / Qwen / DeepSeek: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

Several blocks may follow prose. When a model skips the tags and answers with a
fenced ```json block or a bare object `{"name": N, "arguments": {...}}` whose N is a
declared tool, that is taken as a call too (never for undeclared names or when no
tools were given).
"""

from __future__ import annotations

from mlxcel.chat.tool_parsers.base import Tool, register
from mlxcel.chat.tool_parsers.json_calls import call_object_schema
from mlxcel.chat.tool_parsers.tool_call_tags import FUNCTION, OPEN, ToolCallTagParser


@register
class HermesParser(ToolCallTagParser):
    name = "hermes"
    detect_priority = 170
    streams_arguments = True
    json_wrapper = True
    content_markers = (OPEN,)
    untagged_fallback = True

    @classmethod
    def matches_template(cls, template: str) -> bool:
        # Qwen3-Coder's XML bodies and GLM's <arg_key> pairs use the same tag
        return OPEN in template and FUNCTION not in template and "<arg_key>" not in template

    def call_grammar(self, tools: list[Tool]) -> dict | None:
        return {"prefix": OPEN + "\n", "suffix": "\n</tool_call>", "schema": call_object_schema(tools)}
