"""Llama 3.x calls.

    {"name": "get_weather", "parameters": {"city": "Paris"}}       (the whole reply)
    <|python_tag|>{"name": "get_weather", "parameters": {...}}; {"name": ...}

A bare JSON reply is a call only when it names a declared tool; after
`<|python_tag|>` any name is taken. Several objects may be separated by `;`.
Both forms stream. `<|python_tag|>` followed by code rather than JSON is a
built-in call (`brave_search.call(query="...")`) or, when a `python` or
`code_interpreter` tool is declared, code for it: `{"code": "..."}`, sent at the end.
"""

from __future__ import annotations

import json

from mlxcel.chat.tool_parsers.base import Tool, register
from mlxcel.chat.tool_parsers.json_calls import JsonCallReader, call_object_schema
from mlxcel.chat.tool_parsers.pythonic import python_calls
from mlxcel.chat.tool_parsers.stream_machine import StreamMachineParser

PYTHON_TAG = "<|python_tag|>"
_CODE_TOOLS = ("python", "code_interpreter")


@register
class Llama3Parser(StreamMachineParser):
    name = "llama3"
    detect_priority = 160
    streams_arguments = True
    json_wrapper = True

    def __init__(self, tools: list[dict] | None = None) -> None:
        super().__init__(tools)
        self.state = "start"
        self.tagged = False  # calls follow <|python_tag|>
        self.reader: JsonCallReader | None = None

    @classmethod
    def matches_template(cls, template: str) -> bool:
        if "<function=" in template or "[func_name1(" in template:
            return False  # Functionary v3.1 and the pythonic Llama templates
        return PYTHON_TAG in template or '"parameters": dictionary of argument name' in template

    def call_grammar(self, tools: list[Tool]) -> dict | None:
        return {"prefix": PYTHON_TAG, "suffix": "", "schema": call_object_schema(tools, "parameters")}

    def step(self) -> bool:
        return getattr(self, f"_in_{self.state}")()

    def _new_reader(self) -> None:
        accept = None if self.tagged else self.is_declared
        self.reader = JsonCallReader(accept, stop_chars="<;", strict_head=not self.tagged)
        self.state = "json"

    def _in_start(self) -> bool:
        stripped = self.buf.lstrip()
        if not stripped and not self.final:
            return False
        if stripped.startswith("{") and self.tools:
            self.held, self.buf = self.buf[: len(self.buf) - len(stripped)], stripped
            self._new_reader()
        else:
            self.state = "content"
        return True

    def _in_content(self) -> bool:
        if self.content_until((PYTHON_TAG,))[0] < 0:
            return False
        self.held, self.buf, self.tagged = PYTHON_TAG, self.buf[len(PYTHON_TAG) :], True
        self.state = "tag"
        return True

    def _in_tag(self) -> bool:
        stripped = self.buf.lstrip()
        if not stripped and not self.final:
            return False
        self.held += self.buf[: len(self.buf) - len(stripped)]
        self.buf = stripped
        if stripped.startswith("{"):
            self._new_reader()
        else:
            self.state = "code"
        return True

    def _in_json(self) -> bool:
        assert self.reader is not None
        if not self.buf:
            return False
        step = self.feed_call_reader(self.reader)
        if step.invalid:
            self.emit_content(self.held + step.raw)
            self.reader, self.held, self.state = None, "", "content"
            return True
        if step.done:
            self.reader, self.state = None, "after"
            return True
        return False

    def _in_after(self) -> bool:
        if not self.drop_whitespace():
            return False
        if self.buf[0] == ";":
            self.buf, self.state = self.buf[1:], "next"
        else:
            self.state, self.trim_content = "content", True
        return True

    def _in_next(self) -> bool:
        if not self.drop_whitespace():
            return False
        if self.buf[0] == "{":
            self._new_reader()
        else:
            self.state, self.trim_content = "content", True
        return True

    def _in_code(self) -> bool:
        self.held += self.buf
        self.buf = ""
        if not self.final:
            return False
        code = self.held[len(PYTHON_TAG) :].strip()
        calls = python_calls(code) if ".call(" in code else None
        if calls:
            for name, arguments in calls:
                self.emit_call(name.removesuffix(".call"), arguments)
        elif code_tool := next((n for n in _CODE_TOOLS if self.is_declared(n)), None):
            self.emit_call(code_tool, json.dumps({"code": code}, ensure_ascii=False))
        else:
            self.emit_content(self.held)
        self.held, self.state = "", "content"
        return False

    def at_end(self) -> None:
        if self.reader is not None and not self.reader.started:
            self.emit_content(self.held + self.reader.text)
        self.reader, self.held = None, ""
