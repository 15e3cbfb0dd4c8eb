"""GLM-4.5/4.6/4.7 (glm4_moe and kin): key/value tag pairs inside `<tool_call>`.

    I'll check.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>
    <arg_key>days</arg_key><arg_value>3</arg_value></tool_call>

GLM-4.5 puts newlines between the parts; 4.7 writes them back to back. Both read the same.
"""

from __future__ import annotations

from typing import ClassVar

from mlxcel.chat.tool_parsers.arg_pairs import ArgPairsParser
from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.block_stream import Kind


@register
class Glm47Parser(ArgPairsParser):
    name = "glm47"
    detect_priority = 20
    KEY_TAG: ClassVar[str] = "arg_key"
    VALUE_TAG: ClassVar[str] = "arg_value"
    OPENINGS: ClassVar[dict[str, Kind]] = {"<tool_call>": "call"}
    CLOSINGS: ClassVar[dict[str, str]] = {"<tool_call>": "</tool_call>"}

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return "<tool_call>" in template and "<arg_key>" in template
