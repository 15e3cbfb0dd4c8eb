"""IBM Granite 3.x: a marker followed by a JSON list of calls.

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]

Granite 3.3 may also wrap its answer in `<think>`/`<response>` sections and write the
call as `<response><tool_call>[...]</tool_call></response>`. The list ends where its
JSON closes; a following `</tool_call>` belongs to it.
"""

from __future__ import annotations

from typing import ClassVar

from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.block_stream import Block, BlockStreamParser, Kind, Opening, prefix_state
from mlxcel.chat.tool_parsers.json_spans import Malformed, call_list

TOOL_CALL = "<|tool_call|>"
TAGGED_CALL, TAGGED_END = "<tool_call>", "</tool_call>"


@register
class GraniteParser(BlockStreamParser):
    name = "granite"
    detect_priority = 80
    OPENINGS: ClassVar[dict[str, Kind]] = {
        TOOL_CALL: "call",
        TAGGED_CALL: "call",
        "<think>": "reasoning",
        "<response>": "drop",
        "</response>": "drop",
    }
    CLOSINGS: ClassVar[dict[str, str]] = {"<think>": "</think>"}

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return ("<|start_of_role|>" in template and TOOL_CALL in template) or "<response><tool_call>" in template

    def find_closing(self, opening: Opening, text: str, final: bool) -> tuple[int, int] | None:
        if opening.kind != "call":
            return super().find_closing(opening, text, final)
        start = opening.body_start
        while start < len(text) and text[start].isspace():
            start += 1
        if start == len(text):
            return (start, start) if final else None
        try:
            end = self.json_value_end(text, start)
        except Malformed as error:  # not a JSON list: the marker stood alone
            return error.at, error.at
        if end is None:
            return None
        k = end
        while k < len(text) and text[k].isspace():
            k += 1
        state = prefix_state(text, k, TAGGED_END)
        if state == "partial" and not final:
            return None
        return end, (k + len(TAGGED_END) if state == "yes" else end)

    def calls_from_block(self, block: Block) -> list[tuple[str, str]]:
        return call_list(block.body, "name", "arguments")
