"""What chat output parsers hand back: content, reasoning and tool-call pieces."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ToolCallDelta:
    """A piece of one tool call. The first delta of a call carries `id` and `name`
    (and `arguments == ""`); later ones carry argument fragments only."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class ParsedDelta:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.content or self.reasoning or self.tool_calls)

    def extend(self, other: ParsedDelta) -> None:
        self.content += other.content
        self.reasoning += other.reasoning
        self.tool_calls.extend(other.tool_calls)


@dataclass
class ToolCall:
    """A finished call. `arguments` is JSON text: the model's own text for object
    arguments in JSON formats, or JSON built from the parsed values otherwise."""

    name: str
    arguments: str
    id: str = ""


@dataclass
class ParsedOutput:
    """The authoritative end-of-generation parse."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)


def new_call_id() -> str:
    import uuid

    return f"call_{uuid.uuid4().hex[:24]}"
