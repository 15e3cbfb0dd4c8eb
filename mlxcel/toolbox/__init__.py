"""The built-in tools a chat's agent may call through the server (llama-server's
`--tools`): reading, searching and editing files and running shell commands on the
machine the server runs on, for the web UI. Off unless the server is started with them."""

from __future__ import annotations

from mlxcel.toolbox.base import ParamError, ServerTool, ToolContext, ToolError, check_params, kill_running_groups
from mlxcel.toolbox.files import EditFile, ReadFile, WriteFile
from mlxcel.toolbox.search import FileGlobSearch, GrepSearch
from mlxcel.toolbox.shell import ExecShellCommand, GetInfo

# in llama-server's order
TOOLS: dict[str, type[ServerTool]] = {tool.name: tool for tool in (
    ReadFile, FileGlobSearch, GrepSearch, ExecShellCommand, WriteFile, EditFile, GetInfo)}


def tool_names(text: str) -> tuple[str, ...]:
    """--tools' value, "all" or names separated by commas, checked: the names in order."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name != "all" and name not in TOOLS]
    if unknown:
        raise ValueError(f"unknown tool {unknown[0]!r}; available tools: {', '.join(TOOLS)}")
    if not names:
        raise ValueError(f"no tool named; give 'all' or some of: {', '.join(TOOLS)}")
    return tuple(TOOLS) if "all" in names else tuple(name for name in TOOLS if name in names)


def build_tools(names: tuple[str, ...]) -> dict[str, ServerTool]:
    return {name: TOOLS[name]() for name in names}


__all__ = ["TOOLS", "ParamError", "ServerTool", "ToolContext", "ToolError", "build_tools", "check_params",
           "kill_running_groups", "tool_names"]
