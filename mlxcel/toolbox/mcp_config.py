"""MCP server definitions in Cursor's format, {"mcpServers": {NAME: {"command", "args",
"env", "cwd", "timeout_ms"}}}: checked at start, so a bad file fails the start in one line."""

from __future__ import annotations

import logging

from mlxcel.config import McpServer

log = logging.getLogger("mlxcel.toolbox")
NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def parse_mcp_servers(data, source: str) -> list[McpServer]:
    """The servers one parsed JSON value defines. An entry without a command is skipped
    with a warning, as llama-server does; anything else malformed is a ValueError naming it."""
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ValueError(f'{source}: expected {{"mcpServers": {{NAME: {{"command": ...}}}}}}')
    out = []
    for name, entry in servers.items():
        where = f"{source}: mcpServers.{name}"
        if not name or not set(name) <= NAME_CHARS or len(name) > 64:
            raise ValueError(f"{where}: a server name is 1-64 letters, digits, '_' or '-'")
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be an object")
        command = entry.get("command")
        if not command:
            log.warning("MCP server %r has no command, skipping it", name)
            continue
        args, env, cwd = entry.get("args", []), entry.get("env", {}), entry.get("cwd")
        timeout = entry.get("timeout_ms", 30_000)
        if not isinstance(command, str) or not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"{where}: command is a string and args a list of strings")
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ValueError(f"{where}: env maps names to strings")
        if cwd is not None and not isinstance(cwd, str):
            raise ValueError(f"{where}: cwd is a string")
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 3_600_000:
            raise ValueError(f"{where}: timeout_ms is a whole number of milliseconds, 1 to 3600000")
        out.append(McpServer(name, command, tuple(args), tuple(env.items()), cwd or None, timeout))
    return out
