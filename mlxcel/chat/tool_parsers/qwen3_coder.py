"""Qwen3-Coder XML calls:

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

Values are coerced against the tool's schema (coercion) and the arguments JSON
is built key by key as each value completes. A JSON body inside `<tool_call>` is
read as in Hermes, and a `<function=` block without the outer tag is accepted.
"""

from __future__ import annotations

from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.tool_call_tags import FUNCTION, OPEN, PARAMETER, ToolCallTagParser


@register
class Qwen3CoderParser(ToolCallTagParser):
    name = "qwen3_coder"
    detect_priority = 10
    streams_arguments = True
    content_markers = (OPEN, FUNCTION)

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return OPEN in template and FUNCTION in template and PARAMETER in template
