"""LongCat-Flash: key/value tag pairs inside `<longcat_tool_call>`.

    <longcat_tool_call>get_weather
    <longcat_arg_key>city</longcat_arg_key>
    <longcat_arg_value>Paris</longcat_arg_value>
    </longcat_tool_call>

Some LongCat checkpoints write a JSON call object in the block instead; that is read too.
"""

from __future__ import annotations

from typing import ClassVar

from mlxcel.chat.tool_parsers.arg_pairs import ArgPairsParser
from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.block_stream import Kind


@register
class LongCatParser(ArgPairsParser):
    name = "longcat"
    detect_priority = 30
    KEY_TAG: ClassVar[str] = "longcat_arg_key"
    VALUE_TAG: ClassVar[str] = "longcat_arg_value"
    OPENINGS: ClassVar[dict[str, Kind]] = {"<longcat_tool_call>": "call"}
    CLOSINGS: ClassVar[dict[str, str]] = {"<longcat_tool_call>": "</longcat_tool_call>"}

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return "<longcat_tool_call>" in template
