"""Tools of MCP servers (stdio transport: one JSON-RPC message a line on the child's stdin
and stdout), served through POST /tools as `<server>_<tool>`. Each server is started once
at start-up to list its tools, then started again on the first call and kept; one that
died is started again on the next call (after a 30 s pause when it cannot start), and one
that misses a call's deadline is killed, so a hung server cannot hold a call for ever."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time

from mlxcel.config import McpServer
from mlxcel.toolbox.base import ServerTool, ToolContext
from mlxcel.toolbox.paths import ToolError

log = logging.getLogger("mlxcel.toolbox")
PROTOCOL_VERSION = "2024-11-05"
DISCOVERY_SECONDS = 10.0  # one server's start and tools/list at start-up
COOLDOWN_SECONDS = 30.0  # after a server could not start
FRAME_MAX = 16 << 20  # one JSON-RPC line
RESULT_MAX = 1 << 20  # text of one tool result kept


class McpError(Exception):
    pass


class McpConnection:
    """One running server: requests go one at a time; replies are matched by id, and
    notifications and stale replies are skipped."""

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self._child: asyncio.subprocess.Process | None = None
        self._next_id = 1
        self._lock = asyncio.Lock()
        self._hung_up = False  # its output ended: a server that exits is not reaped at once, or may not exit

    @property
    def alive(self) -> bool:
        return self._child is not None and self._child.returncode is None and not self._hung_up

    async def start(self) -> None:
        env = {**os.environ, **dict(self.server.env)}
        self._child = await asyncio.create_subprocess_exec(
            self.server.command, *self.server.args, cwd=self.server.cwd, env=env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, limit=FRAME_MAX,
            start_new_session=True)
        await self._request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                                           "clientInfo": {"name": "mlxcel", "version": "1.0"}})
        await self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def list_tools(self) -> list[dict]:
        tools: list[dict] = []
        cursor = None
        for _ in range(100):  # pages
            result = await self._request("tools/list", {"cursor": cursor} if cursor else {})
            page = result.get("tools") if isinstance(result, dict) else None
            tools += [t for t in page or [] if isinstance(t, dict) and isinstance(t.get("name"), str) and t["name"]]
            cursor = result.get("nextCursor") if isinstance(result, dict) else None
            if not isinstance(cursor, str) or not cursor:
                break
        return tools

    async def call(self, tool: str, arguments: dict) -> dict:
        return await self._request("tools/call", {"name": tool, "arguments": arguments})

    async def _request(self, method: str, params: dict):
        async with self._lock:
            ident = self._next_id
            self._next_id += 1
            await self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
            while True:
                try:
                    line = await self._child.stdout.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    raise McpError("a reply line over 16 MB") from None
                if not line:
                    self._hung_up = True
                    raise McpError("transport closed")
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue  # not a frame (a log line on stdout)
                if not isinstance(reply, dict) or reply.get("id") != ident:
                    continue  # a notification, or a reply to a call that timed out
                if "error" in reply:
                    error = reply["error"]
                    message = error.get("message") if isinstance(error, dict) else error
                    raise McpError(str(message or "unknown error"))
                return reply.get("result")

    async def _send(self, message: dict) -> None:
        if not self.alive:
            raise McpError("transport closed")
        try:
            self._child.stdin.write(json.dumps(message).encode() + b"\n")
            await self._child.stdin.drain()
        except (ConnectionError, RuntimeError):
            self._hung_up = True
            raise McpError("transport closed") from None

    async def close(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        if child.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            await child.wait()


class McpHub:
    """Every configured server: the tools found at start-up, and a connection per
    server, made on its first call."""

    def __init__(self, servers: tuple[McpServer, ...]) -> None:
        self.servers = {s.name: s for s in servers}
        self._connections: dict[str, McpConnection] = {}
        self._cooldown: dict[str, float] = {}
        self._starting: dict[str, asyncio.Lock] = {}

    async def discover(self) -> list[McpTool]:
        found = await asyncio.gather(*(self._discover(s) for s in self.servers.values()))
        return [tool for tools in found for tool in tools]

    async def _discover(self, server: McpServer) -> list[McpTool]:
        connection = McpConnection(server)
        try:
            await asyncio.wait_for(connection.start(), DISCOVERY_SECONDS)
            listed = await asyncio.wait_for(connection.list_tools(), DISCOVERY_SECONDS)
        except (OSError, McpError, asyncio.TimeoutError) as exc:
            log.warning("MCP server %r: no tools listed: %s", server.name, _reason(exc))
            return []
        finally:
            await connection.close()
        log.info("MCP server %r: %d tools", server.name, len(listed))
        return [McpTool(self, server.name, t) for t in listed]

    async def call(self, server_name: str, tool: str, arguments: dict) -> dict:
        server = self.servers[server_name]
        connection = await self._connection(server)
        try:
            result = await asyncio.wait_for(connection.call(tool, arguments), server.timeout_ms / 1000)
        except asyncio.TimeoutError:
            await self._drop(server_name, connection)  # a hung server is not kept
            raise ToolError("request timed out") from None
        except McpError as exc:
            if not connection.alive:
                await self._drop(server_name, connection)
            raise ToolError(str(exc)) from None
        return _as_answer(result)

    async def _connection(self, server: McpServer) -> McpConnection:
        lock = self._starting.setdefault(server.name, asyncio.Lock())
        async with lock:
            current = self._connections.get(server.name)
            if current is not None and current.alive:
                return current
            if current is not None:
                await self._drop(server.name, current)
            if time.monotonic() < self._cooldown.get(server.name, 0):
                raise ToolError(f"MCP server unavailable: {server.name}")
            connection = McpConnection(server)
            try:
                await asyncio.wait_for(connection.start(), DISCOVERY_SECONDS)
            except (OSError, McpError, asyncio.TimeoutError) as exc:
                await connection.close()
                self._cooldown[server.name] = time.monotonic() + COOLDOWN_SECONDS
                log.warning("MCP server %r could not start: %s", server.name, _reason(exc))
                raise ToolError(f"MCP server unavailable: {server.name}") from None
            self._connections[server.name] = connection
            return connection

    async def _drop(self, name: str, connection: McpConnection) -> None:
        if self._connections.get(name) is connection:
            del self._connections[name]
        await connection.close()

    async def close(self) -> None:
        for connection in list(self._connections.values()):
            await connection.close()
        self._connections.clear()


def _reason(exc: BaseException) -> str:
    return "timed out" if isinstance(exc, asyncio.TimeoutError) else str(exc) or type(exc).__name__


def _as_answer(result) -> dict:
    """A tools/call result as /tools answers: its text parts joined, or the error it reports."""
    parts = result.get("content") if isinstance(result, dict) else None
    texts = [p["text"] for p in parts or [] if isinstance(p, dict) and p.get("type") == "text"
             and isinstance(p.get("text"), str)]
    text = "\n".join(texts)
    if len(text) > RESULT_MAX:
        text = text[:RESULT_MAX] + "\n[output truncated]"
    if isinstance(result, dict) and result.get("isError") is True:
        return {"error": text or "MCP tool returned an error"}
    return {"plain_text_response": text}


class McpTool(ServerTool):
    """One tool of one server. It writes (the UI asks first) unless its server declares it
    read-only (the MCP annotation readOnlyHint)."""

    streams = False

    def __init__(self, hub: McpHub, server_name: str, listed: dict) -> None:
        self.hub = hub
        self.server_name = server_name
        self.tool_name = listed["name"]
        self.name = f"{server_name}_{self.tool_name}"
        self.display_name = self.name
        self.description = listed.get("description") if isinstance(listed.get("description"), str) else ""
        schema = listed.get("inputSchema")
        self.schema = schema if isinstance(schema, dict) else {"type": "object", "properties": {}}
        annotations = listed.get("annotations")
        self.writes = not (isinstance(annotations, dict) and annotations.get("readOnlyHint") is True)
        props = self.schema.get("properties")
        self.properties = props if isinstance(props, dict) else {}
        required = self.schema.get("required")
        self.required = tuple(r for r in required if isinstance(r, str)) if isinstance(required, list) else ()

    def definition(self) -> dict:
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.schema}}

    def listing(self) -> dict:
        return {**super().listing(), "type": "mcp", "uses_cwd": False}

    async def invoke(self, params: dict, call: ToolContext) -> dict:
        return await self.hub.call(self.server_name, self.tool_name, params)


def add_mcp_tools(tools: dict[str, ServerTool], found: list[McpTool]) -> None:
    """The MCP tools beside the built-in ones; a name already taken is skipped."""
    for tool in found:
        if tool.name in tools:
            log.warning("MCP tool %r of server %r has the name of another tool, skipping it", tool.tool_name,
                        tool.server_name)
            continue
        tools[tool.name] = tool
