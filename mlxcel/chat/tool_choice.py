"""tool_choice as the spec's table has it: which tools are rendered, what the model
is told, and whether a call is forced."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlxcel.chat.errors import ChatInputError
from mlxcel.structured.schema_validity import schema_problem

REQUIRED_INSTRUCTION = "You must call one or more of the declared functions to answer."


@dataclass(frozen=True)
class ToolPlan:
    tools: list[dict]  # rendered into the template; empty: the template sees no tools
    instruction: str | None = None
    forced: bool = False
    forced_name: str | None = None


def _name(tool: dict) -> str:
    return tool.get("function", {}).get("name", "")


def plan_tools(tools: list[dict] | None, tool_choice: Any) -> ToolPlan:
    tools = list(tools or [])
    _check_parameters(tools)
    if tool_choice is None or tool_choice == "auto":
        return ToolPlan(tools)
    if tool_choice == "none":
        return ToolPlan([])
    if tool_choice == "required":
        if not tools:
            raise ChatInputError("tool_choice 'required' needs at least one tool in 'tools'")
        return ToolPlan(tools, REQUIRED_INSTRUCTION, forced=True)
    if isinstance(tool_choice, dict):
        if tool_choice.get("type") != "function":
            raise ChatInputError("tool_choice: an object form must have type 'function'")
        function = tool_choice.get("function")
        if function is not None and not isinstance(function, dict):
            raise ChatInputError("tool_choice: 'function' must be an object such as {'name': 'get_weather'}")
        name = (function or {}).get("name") or tool_choice.get("name") or ""
        if not isinstance(name, str):
            raise ChatInputError("tool_choice: the function name must be a string")
        if not name:
            raise ChatInputError("tool_choice: the function name is empty")
        chosen = [t for t in tools if _name(t) == name]
        if not chosen:
            raise ChatInputError(f"tool_choice: function {name!r} is not declared in 'tools'")
        return ToolPlan(chosen, f"You must call the function {name} to answer.", forced=True, forced_name=name)
    raise ChatInputError("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', ...}")


def _check_parameters(tools: list[dict]) -> None:
    """A tool whose parameters are not a JSON schema is a 400 (whatever tool_choice says,
    as OpenAI's and Anthropic's APIs answer); one the grammar engine merely cannot
    express is served."""
    for i, tool in enumerate(tools):
        parameters = tool.get("function", {}).get("parameters")
        if isinstance(parameters, dict):
            problem = schema_problem(parameters)
            if problem:
                raise ChatInputError(f"tools[{i}] ({_name(tool)!r}): its parameters are not a valid JSON schema: "
                                     f"{problem}")
