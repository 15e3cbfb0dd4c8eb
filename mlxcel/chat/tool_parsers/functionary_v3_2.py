""">>>NAME\\n{json}: Meetkai Functionary v3.2.

    >>>all
    Let me look that up.>>>get_weather
    {"city": "Paris"}>>>get_time
    {"zone": "CET"}

Each message starts with `>>>` and a recipient line: `all` is plain content, any other
name is a call whose arguments are the JSON object that follows (`python` may take
raw code instead). The generation prompt ends with `>>>`, so the first recipient line
comes without it.
"""

from __future__ import annotations

import re
from typing import ClassVar

from mlxcel.chat.markers import partial_marker_length
from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.block_stream import Block, BlockStreamParser, Opening
from mlxcel.chat.tool_parsers.coercion import arguments_json
from mlxcel.chat.tool_parsers.json_spans import Malformed, loads_or_none

PROMPT = ">>>"
CONTENT_RECIPIENT = "all"
_NAME_CHAR = re.compile(r"[\w.\-]")


@register
class FunctionaryV32Parser(BlockStreamParser):
    name = "functionary_v3_2"
    detect_priority = 120
    CLOSINGS: ClassVar[dict[str, str]] = {}

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return ">>>all" in template

    def _recipient(self, text: str, i: int, first: bool) -> tuple[str, Opening | None]:
        """Read a recipient line at `text[i]`: ("yes", opening), ("partial", None) while
        the text ends inside it, or ("no", None)."""
        j = i
        while j < len(text) and _NAME_CHAR.match(text[j]):
            j += 1
        if j == len(text):
            return "partial", None
        name = text[i:j]
        if not name or text[j] != "\n":
            return "no", None
        start = i - (0 if first else len(PROMPT))
        if name == CONTENT_RECIPIENT:
            return "yes", Opening(start, j + 1, "drop", CONTENT_RECIPIENT)
        if first:  # without the prompt marker, only a declared tool followed by JSON counts
            declared = {t.get("function", t).get("name") for t in self.tools}
            if name != "python" and self.tools and name not in declared:
                return "no", None
            if name != "python":
                if j + 1 == len(text):
                    return "partial", None
                if text[j + 1] != "{":
                    return "no", None
        return "yes", Opening(start, j + 1, "call", "call", name)

    def find_opening(self, text: str, pos: int, final: bool) -> tuple[int, Opening | None]:
        if pos == 0:
            state, opening = self._recipient(text, 0, first=True)
            if state == "yes" or (state == "partial" and not final):
                return 0, opening
        search = pos
        while True:
            i = text.find(PROMPT, search)
            if i < 0:
                break
            state, opening = self._recipient(text, i + len(PROMPT), first=False)
            if state == "yes" or (state == "partial" and not final):
                return i, opening
            search = i + 1
        if final:
            return len(text), None
        return len(text) - partial_marker_length(text[pos:], [PROMPT]), None

    def find_closing(self, opening: Opening, text: str, final: bool) -> tuple[int, int] | None:
        i = opening.body_start
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        if i == len(text):
            return (len(text), len(text)) if final else None
        if text[i] != "{":
            if opening.name == "python":  # raw code runs to the end of the message
                return (len(text), len(text)) if final else None
            return self._skip_malformed(text, i, final)
        try:
            end = self.json_value_end(text, i)
        except Malformed as error:
            return self._skip_malformed(text, error.at, final)
        return None if end is None else (end, end)

    @staticmethod
    def _skip_malformed(text: str, at: int, final: bool) -> tuple[int, int] | None:
        """A body that is not JSON runs to the next recipient marker."""
        i = text.find(PROMPT, at)
        if i >= 0:
            return i, i
        return (len(text), len(text)) if final else None

    def calls_from_block(self, block: Block) -> list[tuple[str, str]]:
        body = block.body.strip()
        name = block.opening.name
        if isinstance(loads_or_none(body), dict):
            return [(name, body)]
        if name == "python" and body and not body.startswith("{"):
            return [(name, arguments_json({"code": block.body}))]
        return []
