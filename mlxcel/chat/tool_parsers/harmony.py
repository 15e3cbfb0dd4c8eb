"""GPT-OSS Harmony messages:

    <|channel|>analysis<|message|>thinking...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>
    <|start|>assistant<|channel|>final<|message|>The answer.<|return|>

A message whose header names a recipient (`to=functions.NAME`, in the channel
part or the role part) is a call, sent whole when `<|call|>` ends it; the
`analysis` channel is reasoning; `final` and recipient-less `commentary` are
content. Text before any header is content. Headers and tokens never reach the
output.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from mlxcel.chat.deltas import ParsedOutput
from mlxcel.chat.markers import find_first, partial_marker_length
from mlxcel.chat.tool_parsers.base import register
from mlxcel.chat.tool_parsers.stream_machine import StreamMachineParser, collect

START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
MESSAGE_ENDS = ("<|end|>", "<|return|>", "<|call|>")
HEADER_OPENERS = (START, CHANNEL)
_BODY_MARKERS = MESSAGE_ENDS + HEADER_OPENERS + (MESSAGE, CONSTRAIN)
_CHANNEL_NAME = re.compile(re.escape(CHANNEL) + r"\s*(\w+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


@dataclass
class HarmonyOutput(ParsedOutput):
    """ParsedOutput plus the analysis-channel text, which Harmony carries inline."""

    reasoning: str = ""


@register
class HarmonyParser(StreamMachineParser):
    name = "harmony"
    detect_priority = 70

    def __init__(self, tools: list[dict] | None = None) -> None:
        super().__init__(tools)
        self.state = "body"
        self.kind = "content"  # content | reasoning | call
        self.call_name = ""
        self.call_body = ""

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return CHANNEL in template and MESSAGE in template

    def parse(self, text: str) -> HarmonyOutput:
        machine = type(self)(self.tools)
        delta = machine.feed(text)
        delta.extend(machine.finish())
        output = collect(delta)
        return HarmonyOutput(output.content, output.tool_calls, reasoning=delta.reasoning)

    def step(self) -> bool:
        return self._in_header() if self.state == "header" else self._in_body()

    def _release(self, text: str) -> None:
        if self.kind == "call":
            self.call_body += text
        elif self.kind == "reasoning":
            self.emit_reasoning(text)
        else:
            self.emit_content(text)

    def _in_body(self) -> bool:
        at, marker = find_first(self.buf, _BODY_MARKERS)
        if marker is None:
            keep = 0 if self.final else partial_marker_length(self.buf, _BODY_MARKERS)
            self._release(self.buf[: len(self.buf) - keep])
            self.buf = self.buf[len(self.buf) - keep :]
            return False
        self._release(self.buf[:at])
        self.buf = self.buf[at:]
        if marker in HEADER_OPENERS or marker in MESSAGE_ENDS:
            self._end_message(terminated=True)
        if marker in HEADER_OPENERS:
            self.state = "header"
        else:
            self.buf = self.buf[len(marker) :]  # an end token, or a stray header token
        return True

    def _in_header(self) -> bool:
        end = self.buf.find(MESSAGE)
        if end < 0:
            if self.final:
                self.buf = ""  # an unfinished header is markup only
            return False
        header, self.buf = self.buf[:end], self.buf[end + len(MESSAGE) :]
        recipient = _RECIPIENT.search(header)
        channel = _CHANNEL_NAME.search(header)
        if recipient:
            self.kind, self.call_name, self.call_body = "call", recipient.group(1), ""
            self.call_name = self.call_name.removeprefix("functions.")
        else:
            self.kind = "reasoning" if channel and channel.group(1) == "analysis" else "content"
        self.state = "body"
        return True

    def _end_message(self, terminated: bool) -> None:
        if self.kind == "call":
            arguments = self.call_body.strip() or "{}"
            if terminated or _is_json(arguments):
                self.emit_call(self.call_name, arguments)
            else:
                self.emit_content(self.call_body)
        self.kind, self.call_body = "content", ""

    def at_end(self) -> None:
        if self.state == "body":
            self._end_message(terminated=False)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False
