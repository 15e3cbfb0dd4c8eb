"""The interface every tool-call format implements, and the registry of formats.

A parser is created per request with the request's tools. It is fed the model's
visible text (reasoning already split off) piece by piece through `feed`, returning
what may be shown now: content that is certainly not markup, and tool-call deltas.
A piece that might be the start of a delimiter is held back until it resolves.
`finish` flushes what is held. `parse` is the final, authoritative parse of the whole
text; the streamer's calls are reconciled against it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from mlxcel.chat.deltas import ParsedDelta, ParsedOutput

# a tool as the request declares it, OpenAI shape: {"type": "function", "function": {...}}
Tool = dict[str, Any]


class ToolCallParser(ABC):
    #: registry name, as `--tool-call-parser NAME` takes it
    name: ClassVar[str]
    #: detection order (lowest first): formats whose template markers are more
    #: specific come before those whose markers other templates share
    detect_priority: ClassVar[int]
    #: True when names and arguments stream as generated; False when a call is sent
    #: as one start chunk and one arguments chunk at the end of generation
    streams_arguments: ClassVar[bool] = False
    #: True when the wire shape is a JSON object inside a fixed wrapper, so a forced
    #: tool_choice can be constrained by a grammar (see `call_grammar`)
    json_wrapper: ClassVar[bool] = False

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self.tools = tools or []

    @classmethod
    @abstractmethod
    def matches_template(cls, template: str) -> bool:
        """Whether a chat template uses this format (sniffed from its markers)."""

    @abstractmethod
    def feed(self, text: str) -> ParsedDelta:
        """Consume the next piece of generated text."""

    @abstractmethod
    def finish(self) -> ParsedDelta:
        """End of generation: release anything held back."""

    @abstractmethod
    def parse(self, text: str) -> ParsedOutput:
        """Parse a whole generation (independent of any feeding)."""

    def call_grammar(self, tools: list[Tool]) -> dict | None:
        """For json_wrapper formats: a description the structured-output engine can
        turn into a grammar forcing one call to one of `tools`:
        {"prefix": str, "suffix": str, "schema": <JSON schema of the call object>}.
        None when the format cannot be constrained this way."""
        return None

    def tool_schema(self, name: str) -> dict | None:
        """The JSON schema of a declared tool's parameters, if declared."""
        for tool in self.tools:
            function = tool.get("function", tool)
            if function.get("name") == name:
                return function.get("parameters") or {}
        return None


TOOL_PARSERS: dict[str, type[ToolCallParser]] = {}


def register(cls: type[ToolCallParser]) -> type[ToolCallParser]:
    if cls.name in TOOL_PARSERS:
        raise ValueError(f"tool parser {cls.name!r} registered twice")
    if not isinstance(getattr(cls, "detect_priority", None), int):
        raise ValueError(f"tool parser {cls.name!r} declares no detect_priority")
    TOOL_PARSERS[cls.name] = cls
    return cls


def detect_parser(template: str | None) -> type[ToolCallParser] | None:
    """The format, in detection priority, whose markers the template carries first."""
    if not template:
        return None
    for cls in sorted(TOOL_PARSERS.values(), key=lambda c: (c.detect_priority, c.name)):
        if cls.matches_template(template):
            return cls
    return None
