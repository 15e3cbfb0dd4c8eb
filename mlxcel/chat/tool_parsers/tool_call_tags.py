"""The `<tool_call> ... </tool_call>` machine shared by Hermes/Qwen and Qwen3-Coder.

A block holds either a JSON call object (Hermes) or XML-style functions
(Qwen3-Coder: `<function=NAME><parameter=KEY>VALUE</parameter></function>`); both
parsers read both, and differ in which markers open a call outside a block and
in Hermes' fallback for a fenced or bare JSON call without any tag.

A block that never turns into a call is released verbatim as content.
"""

from __future__ import annotations

import re
from typing import ClassVar

from mlxcel.chat.markers import find_first
from mlxcel.chat.tool_parsers.coercion import coerce_value, json_member, property_schema
from mlxcel.chat.tool_parsers.json_calls import JsonCallReader, ReadStep, skip_whitespace
from mlxcel.chat.tool_parsers.stream_machine import StreamMachineParser

OPEN, CLOSE = "<tool_call>", "</tool_call>"
FUNCTION, END_FUNCTION = "<function=", "</function>"
PARAMETER, END_PARAMETER = "<parameter=", "</parameter>"
_FUNCTION_TAG = re.compile(r"<function=([^>\n]{0,256})>")
_VALUE_ENDS = (END_PARAMETER, PARAMETER, END_FUNCTION, CLOSE)
_BODY_TAGS = (PARAMETER, END_FUNCTION, CLOSE)
# a Markdown fence that may hold a JSON call, and what may still grow into one
_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\r?\n\s*")
_FENCE_SO_FAR = re.compile(r"```[ \t]*(?:j|js|jso|json)?[ \t]*\r?")


def _strip_one_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


class XmlFunctionReader:
    """Reads one `<function=NAME>...</function>` from text fed piece by piece,
    starting at `<function=`. Arguments JSON is built key by key as each value
    completes: `{` when the name is read, `"key": value` (comma-separated) per
    parameter, `}` at the end."""

    def __init__(self, parser: StreamMachineParser) -> None:
        self.parser = parser
        self.text = ""
        self.pos = 0
        self.phase = "name"  # name -> body <-> value
        self.started = False
        self.name = ""
        self.members = 0
        self.key = ""
        self.scanned = 0  # where to resume looking for the end of a value

    def feed(self, piece: str) -> ReadStep:
        self.text += piece
        step = ReadStep()
        if self.phase == "name":
            match = _FUNCTION_TAG.match(self.text)
            if match is None:
                if "\n" in self.text or ">" in self.text or len(self.text) > len(FUNCTION) + 256:
                    return self._not_a_function(step)
                return step
            self.name = match.group(1).strip()
            if not self.name or any(c.isspace() for c in self.name):
                return self._not_a_function(step)
            step.name, step.arguments = self.name, "{"
            self.started, self.phase, self.pos = True, "body", match.end()
        while not step.done and self._advance(step):
            pass
        return step

    def _not_a_function(self, step: ReadStep) -> ReadStep:
        # give up only the marker itself, so what follows is read afresh
        step.invalid, step.raw, step.rest = True, FUNCTION, self.text[len(FUNCTION) :]
        return step

    def _advance(self, step: ReadStep) -> bool:
        text = self.text
        if self.phase == "value":
            end, tag = find_first(text, _VALUE_ENDS, max(self.pos, self.scanned))
            if end < 0:
                self.scanned = max(self.pos, len(text) - len(END_PARAMETER))
                return False
            self._add_member(step, _strip_one_newline(text[self.pos : end]))
            self.phase = "body"
            rest = end + len(END_PARAMETER) if tag == END_PARAMETER else end
            self.text, self.pos, self.scanned = text[rest:], 0, 0  # the value is done with
            return True
        self.pos = skip_whitespace(text, self.pos)
        rest = text[self.pos :]
        if rest.startswith(PARAMETER):
            close = text.find(">", self.pos)
            if close < 0:
                return False
            self.key = text[self.pos + len(PARAMETER) : close].strip()
            self.phase, self.pos = "value", close + 1
            return True
        if rest.startswith(END_FUNCTION) or rest.startswith(CLOSE):
            step.arguments += "}"
            step.done = True
            step.rest = text[self.pos + len(END_FUNCTION) :] if rest.startswith(END_FUNCTION) else rest
            return False
        if not rest or any(tag.startswith(rest) for tag in _BODY_TAGS):
            return False
        # stray text between parameters: skip to the next tag
        next_tag = text.find("<", self.pos + 1)
        self.pos = len(text) if next_tag < 0 else next_tag
        return True

    def _add_member(self, step: ReadStep, raw_value: str) -> None:
        tool = self.parser.tool_schema(self.name)
        value = coerce_value(raw_value, property_schema(tool, self.key))
        step.arguments += (", " if self.members else "") + json_member(self.key, value)
        self.members += 1

    def close(self) -> str:
        """End of generation inside the function: close the arguments object (a
        value still being written is left out)."""
        return "}"


class ToolCallTagParser(StreamMachineParser):
    #: markers that open a call in plain content
    content_markers: ClassVar[tuple[str, ...]] = (OPEN,)
    #: accept a fenced/bare JSON call to a declared tool when no tag is used
    untagged_fallback: ClassVar[bool] = False

    def __init__(self, tools: list[dict] | None = None) -> None:
        super().__init__(tools)
        self.state = "content"
        self.reader: JsonCallReader | XmlFunctionReader | None = None
        self.wrapped = False  # inside <tool_call>
        self.closer: str | None = None  # what may close the current call's block
        self.raw_scanned = 0

    def _markers(self) -> tuple[str, ...]:
        if self.untagged_fallback and self.tools:
            return self.content_markers + ("```", "{")
        return self.content_markers

    def step(self) -> bool:
        return getattr(self, f"_in_{self.state}")()

    def _in_content(self) -> bool:
        at, marker = self.content_until(self._markers())
        if at < 0:
            return False
        if marker == OPEN:
            self.held, self.buf, self.wrapped = OPEN, self.buf[len(OPEN) :], True
            self.state = "open"
        elif marker == FUNCTION:
            self._start_reader(XmlFunctionReader(self), wrapped=False)
        else:
            self.state = "fence" if marker == "```" else "bare"
        return True

    def _start_reader(self, reader: JsonCallReader | XmlFunctionReader, wrapped: bool, held: str = "") -> None:
        self.reader, self.wrapped, self.state = reader, wrapped, "call"
        self.held = held if not wrapped else self.held + held
        if wrapped or isinstance(reader, XmlFunctionReader):
            self.closer = CLOSE
        else:
            self.closer = "```" if held else None

    def _in_open(self) -> bool:
        ws = skip_whitespace(self.buf)
        self.held += self.buf[:ws]
        self.buf = self.buf[ws:]
        if self.buf.startswith("{"):
            self._start_reader(JsonCallReader(), wrapped=True)
        elif self.buf.startswith(FUNCTION):
            self._start_reader(XmlFunctionReader(self), wrapped=True)
        elif (not self.buf or FUNCTION.startswith(self.buf)) and not self.final:
            return False
        else:
            self.state = "raw"
        return True

    def _in_call(self) -> bool:
        assert self.reader is not None
        if not self.buf and not self.final:
            return False
        step = self.feed_call_reader(self.reader)
        if step.done:
            self.reader, self.state = None, "after_call"
            return True
        if step.invalid:
            self.reader = None
            if self.wrapped:
                self.held += step.raw
                self.state = "raw"
            else:
                self.emit_content(self.held + step.raw)
                self.state = "content"
            return True
        return False

    def _in_after_call(self) -> bool:
        """Between a finished call and what closes its block: `</tool_call>` (where
        another function may follow first), or the Markdown fence."""
        if not self.drop_whitespace():
            return False
        close = self.closer or ""
        if close and self.buf.startswith(close):
            self.buf, self.state, self.trim_content = self.buf[len(close) :], "content", True
        elif self.wrapped and self.buf.startswith(FUNCTION):
            self._start_reader(XmlFunctionReader(self), wrapped=True)
        elif self.wrapped and self.buf.startswith("{"):
            self._start_reader(JsonCallReader(), wrapped=True)
        elif not self.final and any(tag.startswith(self.buf) for tag in (close, FUNCTION) if tag):
            return False
        else:
            self.state, self.trim_content = "content", True
        return True

    def _in_raw(self) -> bool:
        """A tagged block that is no call: collect it up to `</tool_call>`, then
        release it verbatim."""
        self.held += self.buf
        self.buf = ""
        end = self.held.find(CLOSE, self.raw_scanned)
        if end < 0 and not self.final:
            self.raw_scanned = max(0, len(self.held) - len(CLOSE) + 1)
            return False
        cut = len(self.held) if end < 0 else end + len(CLOSE)
        self.emit_content(self.held[:cut])
        self.buf, self.held, self.state, self.raw_scanned = self.held[cut:], "", "content", 0
        return True

    def _in_fence(self) -> bool:
        match = _FENCE.match(self.buf)
        if match and match.end() < len(self.buf) and self.buf[match.end()] == "{":
            fence, self.buf = self.buf[: match.end()], self.buf[match.end() :]
            self._start_reader(JsonCallReader(self.is_declared, strict_head=True), wrapped=False, held=fence)
            return True
        if not self.final and (_FENCE_SO_FAR.fullmatch(self.buf) or (match and match.end() == len(self.buf))):
            return False
        self.emit_content("```")
        self.buf, self.state = self.buf[3:], "content"
        return True

    def _in_bare(self) -> bool:
        after = skip_whitespace(self.buf, 1)
        if after == len(self.buf) and not self.final:
            return False
        if after < len(self.buf) and self.buf[after] == '"':
            self._start_reader(JsonCallReader(self.is_declared, strict_head=True), wrapped=False)
            return True
        self.emit_content("{")
        self.buf, self.state = self.buf[1:], "content"
        return True

    def at_end(self) -> None:
        reader, self.reader = self.reader, None
        if reader is None:
            return
        if reader.started:
            if isinstance(reader, XmlFunctionReader):
                self.emit_arguments(reader.close())
        else:
            self.emit_content(self.held + reader.text)
        self.held, self.state = "", "content"
