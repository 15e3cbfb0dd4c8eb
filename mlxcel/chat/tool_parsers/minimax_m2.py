"""MiniMax M2: XML invokes inside a `<minimax:tool_call>` block.

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    </minimax:tool_call>

One block may hold several invokes. Parameter values are text, coerced against the
tool's schema. A bare `<invoke ...>` without the wrapper is read the same way.
"""

from __future__ import annotations

import re
from typing import ClassVar

from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.block_stream import Block, BlockStreamParser, Kind
from mlxcel.chat.tool_parsers.coercion import arguments_json, coerce_value, property_schema

_INVOKE = re.compile(r"<invoke\s+name=([\"'])(.*?)\1\s*>(.*?)</invoke>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter\s+name=([\"'])(.*?)\1\s*>(.*?)</parameter>", re.DOTALL)


@register
class MiniMaxM2Parser(BlockStreamParser):
    name = "minimax_m2"
    detect_priority = 50
    OPENINGS: ClassVar[dict[str, Kind]] = {"<minimax:tool_call>": "call", "<invoke name=": "call"}
    CLOSINGS: ClassVar[dict[str, str]] = {
        "<minimax:tool_call>": "</minimax:tool_call>",
        "<invoke name=": "</invoke>",
    }

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return "<minimax:tool_call>" in template

    def calls_from_block(self, block: Block) -> list[tuple[str, str]]:
        body = block.body
        if block.opening.marker == "<invoke name=":
            if not block.complete:
                return []
            body = f"<invoke name={body}</invoke>"
        calls = []
        for invoke in _INVOKE.finditer(body):
            name = invoke.group(2).strip()
            if not name:
                continue
            schema = self.tool_schema(name)
            values = {}
            for param in _PARAMETER.finditer(invoke.group(3)):
                key = param.group(2).strip()
                values[key] = coerce_value(param.group(3), property_schema(schema, key))
            calls.append((name, arguments_json(values)))
        return calls
