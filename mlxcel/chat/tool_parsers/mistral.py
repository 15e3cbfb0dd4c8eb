"""Mistral `[TOOL_CALLS]` calls, in both wire forms:

    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}        (bracketed; [CALL_ID]id may
                                                           come before [ARGS])
    [TOOL_CALLS][{"name": "get_weather", "arguments": {...}}, ...]     (JSON list)

Both stream. `mistral` is registered for templates of the bracketed form and
`mistral_nemo` (a subclass) for the list form; each reads either. A block that
never becomes a call is released verbatim as content.
"""

from __future__ import annotations

import re

from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.json_calls import JsonCallReader
from mlxcel.chat.tool_parsers.json_spans import BraceScanner
from mlxcel.chat.tool_parsers.stream_machine import StreamMachineParser

TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
_NAME_THEN = re.compile(r"([\w.\-]+)(\[ARGS\]|\[CALL_ID\]|\{)")
_NAME_SO_FAR = re.compile(r"[\w.\-]*(\[(A(R(G(S)?)?)?|C(A(L(L(_(I(D)?)?)?)?)?)?)?)?")
_CALL_ID_THEN = re.compile(r"[^\[\]\s]*\[ARGS\]")
_CALL_ID_SO_FAR = re.compile(r"[^\[\]\s]*(\[(A(R(G(S)?)?)?)?)?")


@register
class MistralParser(StreamMachineParser):
    name = "mistral"
    detect_priority = 140
    streams_arguments = True

    def __init__(self, tools: list[dict] | None = None) -> None:
        super().__init__(tools)
        self.state = "content"
        self.reader: JsonCallReader | None = None
        self.scanner: BraceScanner | None = None
        self.in_list = False
        self.name_read = ""

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return TOOL_CALLS in template and ARGS in template

    def step(self) -> bool:
        return getattr(self, f"_in_{self.state}")()

    def _in_content(self) -> bool:
        if self.content_until((TOOL_CALLS,))[0] < 0:
            return False
        self.held, self.buf = TOOL_CALLS, self.buf[len(TOOL_CALLS) :]
        self.state = "opened"
        return True

    def _release(self, text: str) -> bool:
        """The held block is no call: show it as it was written. What is still in
        `buf` is read again as content."""
        self.emit_content(self.held + text)
        self.held, self.state = "", "content"
        return True

    def _in_opened(self) -> bool:
        stripped = self.buf.lstrip()
        if not stripped:
            if self.final:
                return self._release("")
            return False
        self.held += self.buf[: len(self.buf) - len(stripped)]
        self.buf = stripped
        if stripped[0] == "[":
            self.held, self.buf, self.in_list = self.held + "[", stripped[1:], True
            self.state = "item"
        elif stripped[0] == "{":
            self.in_list, self.state = False, "item"
        else:
            self.state = "name"
        return True

    def _in_item(self) -> bool:
        if not self.drop_whitespace():
            return self._release("") if self.final and self.held else False
        if self.buf[0] == "{":
            self.reader, self.state = JsonCallReader(stop_chars=""), "json"
        elif self.buf[0] == "]" and self.in_list:
            self.buf, self.held, self.state = self.buf[1:], "", "content"
            self.trim_content = True
        else:
            self.trim_content = not self.held
            return self._release("")
        return True

    def _in_json(self) -> bool:
        assert self.reader is not None
        if not self.buf:
            return False
        step = self.feed_call_reader(self.reader)
        if step.invalid:
            self.reader = None
            return self._release(step.raw)
        if step.done:
            self.reader, self.state = None, "after_item"
            return True
        return False

    def _in_after_item(self) -> bool:
        if not self.drop_whitespace():
            return False
        if self.in_list and self.buf[0] == ",":
            self.buf, self.state = self.buf[1:], "item"
            return True
        if self.in_list and self.buf[0] == "]":
            self.buf = self.buf[1:]
        self.state, self.trim_content = "content", True
        return True

    def _in_name(self) -> bool:
        match = _NAME_THEN.match(self.buf)
        if match is None:
            if _NAME_SO_FAR.fullmatch(self.buf) and not self.final:
                return False
            return self._release("")
        self.name_read = match.group(1)
        cut = match.end(1) if match.group(2) == "{" else match.end()
        self.held += self.buf[:cut]
        self.buf = self.buf[cut:]
        self.state = "call_id" if match.group(2) == CALL_ID else "args_open"
        return True

    def _in_call_id(self) -> bool:
        match = _CALL_ID_THEN.match(self.buf)
        if match is None:
            if _CALL_ID_SO_FAR.fullmatch(self.buf) and not self.final:
                return False
            return self._release("")
        self.held += self.buf[: match.end()]
        self.buf, self.state = self.buf[match.end() :], "args_open"
        return True

    def _in_args_open(self) -> bool:
        stripped = self.buf.lstrip()
        if not stripped and not self.final:
            return False
        if not stripped or stripped[0] != "{":
            return self._release("")
        self.start_call(self.name_read)
        self.held, self.buf = "", stripped
        self.scanner, self.state = BraceScanner(), "args"
        return True

    def _in_args(self) -> bool:
        assert self.scanner is not None
        if not self.buf:
            return False
        end = self.scanner.scan(self.buf)
        if end < 0:
            self.emit_arguments(self.buf)
            self.buf = ""
            return False
        self.emit_arguments(self.buf[:end])
        self.buf, self.scanner = self.buf[end:], None
        self.state, self.trim_content = "content", True
        return True

    def at_end(self) -> None:
        if self.reader is not None and not self.reader.started:
            self.emit_content(self.held + self.reader.text)
        elif self.held:
            self.emit_content(self.held + self.buf)
        self.reader, self.held, self.buf, self.state = None, "", "", "content"
