"""What every built-in tool is: a name, how the web UI shows it, whether it writes,
its OpenAI function definition, and one call; plus the checks on the arguments a model
sends, so a bad call is a clear error instead of an exception; and the processes of the
calls running now, which a stop kills."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any, ClassVar

from mlxcel.toolbox.paths import ToolError

# the process groups of the commands and searches running now (each in a session of its own)
RUNNING_GROUPS: set[int] = set()


def kill_running_groups() -> None:
    """At the server's stop: the commands and searches still running end with it. A stop
    does not wait for them, and one left running (a command's `sleep 600`, a search's
    regular expression that backtracks for ever) would outlive the server."""
    for group in list(RUNNING_GROUPS):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)


class ParamError(ValueError):
    """Arguments of the wrong shape: the request is refused with a 400."""


class ServerTool:
    name: ClassVar[str]
    display_name: ClassVar[str]
    writes: ClassVar[bool] = False  # the UI asks the user before such a call
    streams: ClassVar[bool] = False  # POST /tools with stream: true
    description: ClassVar[str]
    properties: ClassVar[dict[str, dict]] = {}
    required: ClassVar[tuple[str, ...]] = ()

    def definition(self) -> dict:
        parameters: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            parameters["required"] = list(self.required)
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": parameters}}

    def listing(self) -> dict:
        """GET /tools' entry, in llama-server's shape."""
        return {"display_name": self.display_name, "tool": self.name, "type": "server",
                "permissions": {"write": self.writes}, "uses_cwd": True, "definition": self.definition()}

    async def invoke(self, params: dict, call: ToolContext) -> dict:
        raise NotImplementedError

    def stream(self, params: dict, call: ToolContext) -> AsyncIterator[str]:
        raise NotImplementedError


class ToolContext:
    """Where a call runs: the caller's working directory (x-tool-cwd) and how it wants
    a file back (x-resp-type: base64)."""

    def __init__(self, cwd: str | None = None, resp_type: str | None = None) -> None:
        self.cwd = cwd
        self.resp_type = resp_type


def check_params(tool: ServerTool, params: dict) -> None:
    """Required arguments present, and each known one of its declared JSON type."""
    for name in tool.required:
        if name not in params:
            raise ParamError(f"{tool.name}: missing argument {name!r}")
    for name, value in params.items():
        spec = tool.properties.get(name)
        if spec is None:
            continue
        kind = spec.get("type") if isinstance(spec, dict) else None
        if isinstance(kind, str) and not _CHECKS.get(kind, lambda v: True)(value):
            raise ParamError(f"{tool.name}: argument {name!r} must be {_NAMES.get(kind, kind)}")


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool) and abs(v) < 1 << 53,
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}
_NAMES = {"string": "a string", "integer": "an integer", "boolean": "true or false", "array": "an array",
          "object": "an object"}

__all__ = ["RUNNING_GROUPS", "ParamError", "ServerTool", "ToolContext", "ToolError", "check_params",
           "kill_running_groups"]
