"""Cohere Command R7B, and the older Command R `Action:` text form.

R7B writes its plan, calls and answer in marked sections:

    <|START_THINKING|>I will look up the weather.<|END_THINKING|>
    <|START_ACTION|>[
        {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris"}}
    ]<|END_ACTION|>
    <|START_RESPONSE|>It is sunny.<|END_RESPONSE|>

Command R writes, at the start of a line, `Action:` followed by a JSON list of
{"tool_name", "parameters"} objects, usually in a ```json fence; the ReAct-style
`Action: NAME` line followed by `Action Input: {json}` is read too.
"""

from __future__ import annotations

import re
from typing import ClassVar

from mlxcel.chat.markers import find_first, partial_marker_length
from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.block_stream import Block, BlockStreamParser, Kind, Opening, prefix_state
from mlxcel.chat.tool_parsers.json_spans import Malformed, call_list, loads_or_none

START_ACTION, END_ACTION = "<|START_ACTION|>", "<|END_ACTION|>"
ACTION = "Action:"
ACTION_INPUT = "Action Input:"
FENCE = "```"
_NAME = re.compile(r"[\w.\-]+")
_SPACE = " \t"


def _skip(text: str, i: int, chars: str) -> int:
    while i < len(text) and text[i] in chars:
        i += 1
    return i


@register
class CommandRParser(BlockStreamParser):
    name = "command_r"
    detect_priority = 90
    OPENINGS: ClassVar[dict[str, Kind]] = {
        "<|START_THINKING|>": "reasoning",
        START_ACTION: "call",
        "<|START_RESPONSE|>": "drop",
        "<|END_RESPONSE|>": "drop",
    }
    CLOSINGS: ClassVar[dict[str, str]] = {"<|START_THINKING|>": "<|END_THINKING|>", START_ACTION: END_ACTION}

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return START_ACTION in template or ("<|START_OF_TURN_TOKEN|>" in template and ACTION in template)

    # ---- the `Action:` text form ------------------------------------------------

    def _action(self, text: str, i: int) -> tuple[str, Opening | None]:
        """Read an `Action:` line at `text[i]`: ("yes", opening), ("partial", None) while
        the text ends before it can be told apart from prose, or ("no", None)."""
        j = _skip(text, i + len(ACTION), _SPACE + "\n")
        if j == len(text):
            return "partial", None
        fence = prefix_state(text, j, FENCE)
        if fence == "partial":
            return "partial", None
        if fence == "yes":
            k = j + len(FENCE)
            while k < len(text) and text[k].isalpha():
                k += 1
            k = _skip(text, k, _SPACE + "\n")
            if k == len(text):
                return "partial", None
            return ("yes", Opening(i, k, "call", FENCE)) if text[k] in "[{" else ("no", None)
        if text[j] in "[{":
            return "yes", Opening(i, j, "call", ACTION)
        name = _NAME.match(text, j)
        if not name:
            return "no", None
        k = _skip(text, name.end(), _SPACE)
        if k == len(text):
            return "partial", None
        if text[k] != "\n":
            return "no", None
        k = _skip(text, k, "\n" + _SPACE)
        state = prefix_state(text, k, ACTION_INPUT)
        if state != "yes":
            return state, None
        k = _skip(text, k + len(ACTION_INPUT), _SPACE + "\n")
        if k == len(text):
            return "partial", None
        return ("yes", Opening(i, k, "call", ACTION_INPUT, name.group())) if text[k] == "{" else ("no", None)

    def find_opening(self, text: str, pos: int, final: bool) -> tuple[int, Opening | None]:
        marked_at, marked = find_first(text, self.OPENINGS, pos)
        limit = marked_at if marked is not None else len(text)
        i = text.find(ACTION, pos, limit)
        while i >= 0:
            state, opening = self._action(text, i) if i == 0 or text[i - 1] == "\n" else ("no", None)
            if state == "yes" or (state == "partial" and not final):
                return i, opening
            i = text.find(ACTION, i + 1, limit)
        if marked is not None:
            return marked_at, Opening(marked_at, marked_at + len(marked), self.OPENINGS[marked], marked)
        if final:
            return len(text), None
        return len(text) - partial_marker_length(text[pos:], [*self.OPENINGS, ACTION]), None

    def find_closing(self, opening: Opening, text: str, final: bool) -> tuple[int, int] | None:
        if opening.marker not in (FENCE, ACTION, ACTION_INPUT):
            return super().find_closing(opening, text, final)
        try:
            end = self.json_value_end(text, opening.body_start)
        except Malformed as error:
            return error.at, error.at
        if end is None:
            return None
        if opening.marker != FENCE:
            return end, end
        k = _skip(text, end, _SPACE + "\n")
        state = prefix_state(text, k, FENCE)
        if state == "partial" and not final:
            return None
        return end, (k + len(FENCE) if state == "yes" else end)

    # ---- reading calls ------------------------------------------------------------

    def calls_from_block(self, block: Block) -> list[tuple[str, str]]:
        body = block.body.strip()
        if block.opening.marker == ACTION_INPUT:
            return [(block.opening.name, body)] if isinstance(loads_or_none(body), dict) else []
        return call_list(body, "tool_name", "parameters")
