"""Mistral Nemo / Ministral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`.

The reading is shared with the bracketed form (see mistral.py); this class adds
the template sniffing and the grammar for forced calls.
"""

from __future__ import annotations

from mlxcel.chat.tool_parsers.base import Tool, register
from mlxcel.chat.tool_parsers.json_calls import call_object_schema
from mlxcel.chat.tool_parsers.mistral import ARGS, TOOL_CALLS, MistralParser


@register
class MistralNemoParser(MistralParser):
    name = "mistral_nemo"
    detect_priority = 150
    streams_arguments = True
    json_wrapper = True

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return TOOL_CALLS in template and ARGS not in template

    def call_grammar(self, tools: list[Tool]) -> dict | None:
        return {"prefix": TOOL_CALLS + "[", "suffix": "]", "schema": call_object_schema(tools)}
