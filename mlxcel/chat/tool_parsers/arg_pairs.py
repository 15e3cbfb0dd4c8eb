"""Calls written as a name followed by key/value tag pairs (GLM-4.x, LongCat-Flash).

    <tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>

Values are text, coerced against the tool's schema. A block whose body is a JSON
call object ({"name": ..., "arguments": {...}}) is read as that instead.
"""

from __future__ import annotations

import re
from typing import ClassVar

from mlxcel.chat.tool_parsers.block_stream import Block, BlockStreamParser
from mlxcel.chat.tool_parsers.coercion import arguments_json, coerce_value, property_schema
from mlxcel.chat.tool_parsers.json_spans import call_list


class ArgPairsParser(BlockStreamParser):
    KEY_TAG: ClassVar[str] = ""
    VALUE_TAG: ClassVar[str] = ""

    def calls_from_block(self, block: Block) -> list[tuple[str, str]]:
        body = block.body.strip()
        if body.startswith("{"):
            return call_list(body, "name", "arguments") if block.complete else []
        closing_tag = f"</{self.VALUE_TAG}>"
        if not block.complete and not body.endswith(closing_tag):  # cut off mid-call
            return []
        key_start = f"<{self.KEY_TAG}>"
        name = body.split(key_start, 1)[0].strip()
        if not name or "<" in name:
            return []
        pairs = re.finditer(
            rf"<{self.KEY_TAG}>(.*?)</{self.KEY_TAG}>\s*<{self.VALUE_TAG}>(.*?){re.escape(closing_tag)}",
            body,
            re.DOTALL,
        )
        schema = self.tool_schema(name)
        values = {}
        for pair in pairs:
            key = pair.group(1).strip()
            values[key] = coerce_value(pair.group(2), property_schema(schema, key))
        return [(name, arguments_json(values))]
