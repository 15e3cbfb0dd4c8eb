"""llama-server's server tools, for the web UI's agent (`--tools`): GET /tools lists the
enabled tools, POST /tools {"tool", "params", "stream"} calls one. A tool's own failure
(a missing file, a non-unique edit) is its answer, {"error": ...}, for the model to read;
a malformed call is a 400, an unknown tool a 404, and without --tools both routes answer
llama-server's 403 "this feature is disabled".

A web page must not run commands here. CORS only keeps a page from reading an answer, and a
"simple" cross-site POST is sent without asking first, so a call is refused (403) when its
`Origin` is one the CORS policy does not allow (by default with --tools: only localhost
pages), and it must be sent as application/json, which a page on another site cannot do
without the browser asking the CORS policy first."""

from __future__ import annotations

import json
import os

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mlxcel.http.errors import APIError, invalid_request
from mlxcel.http.json_body import read_json_object
from mlxcel.http.local_callers import RunningCap, check_page_origin
from mlxcel.http.request_context import ClientLeft, run_while_connected
from mlxcel.http.sse import WatchedStreamResponse
from mlxcel.toolbox import ParamError, ServerTool, ToolContext, ToolError, check_params

router = APIRouter()
PATHS = frozenset({"/tools"})
BODY_MAX = 40 << 20  # write_file's 16 MB of content, escaped
RUNNING_MAX = 16  # tool calls at once; more are answered 429


_RUNNING = RunningCap(RUNNING_MAX, "tool calls")


def _tools(request: Request) -> dict[str, ServerTool]:
    tools = request.app.state.server_tools
    if not tools:
        raise APIError(403, "this feature is disabled", "feature_disabled")
    return tools


@router.get("/tools")
async def list_tools(request: Request) -> list[dict]:
    return [tool.listing() for tool in _tools(request).values()]


@router.post("/tools")
async def call_tool(request: Request):
    tools = _tools(request)
    _check_caller(request)
    body = await read_json_object(request, max_bytes=BODY_MAX)
    name, params, stream = body.get("tool"), body.get("params", {}), body.get("stream", False)
    if not isinstance(name, str) or not name:
        raise invalid_request("'tool' must be the name of a tool (GET /tools lists them)")
    if not isinstance(params, dict):
        raise invalid_request("'params' must be an object of the tool's arguments")
    if not isinstance(stream, bool):
        raise invalid_request("'stream' must be true or false")
    tool = tools.get(name)
    if tool is None:
        raise APIError(404, f'unknown tool "{name}"', "invalid_request_error")
    if stream and not tool.streams:
        raise APIError(404, f'tool "{name}" does not support stream = true', "invalid_request_error")
    try:
        check_params(tool, params)
    except ParamError as exc:
        raise invalid_request(str(exc)) from None
    call = _context(request)
    _RUNNING.enter()
    if stream:
        return WatchedStreamResponse(_events(tool, params, call), b"text/event-stream; charset=utf-8",
                                     on_close=_RUNNING.leave)
    try:
        return await _whole(request, tool, params, call)
    finally:
        _RUNNING.leave()


async def _whole(request: Request, tool: ServerTool, params: dict, call: ToolContext):
    """The tool's answer; a client that leaves cancels the call (a command is killed)."""
    try:
        return await run_while_connected(request, tool.invoke(params, call))
    except ToolError as exc:
        return {"error": str(exc)}
    except OSError as exc:
        return {"error": f"the tool failed: {exc.strerror or exc}"}
    except ClientLeft:
        return JSONResponse({"error": "the client left"}, status_code=499)


def _check_caller(request: Request) -> None:
    check_page_origin(request, "tools")
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise APIError(415, "a tool call must be sent as application/json", "invalid_request_error")


def _context(request: Request) -> ToolContext:
    if request.headers.get("x-tool-runtime"):
        raise invalid_request("x-tool-runtime: tool runtimes (containers, ssh) are not supported by mlxcel; tools "
                              "run on the server's machine")
    cwd = request.headers.get("x-tool-cwd") or None
    if cwd is not None:
        cwd = os.path.abspath(os.path.expanduser(cwd))
        if not os.path.isdir(cwd):
            raise invalid_request(f"x-tool-cwd: {cwd} is not a directory")
    resp_type = request.headers.get("x-resp-type") or None
    if resp_type not in (None, "base64"):
        raise invalid_request("x-resp-type: only base64 is known")
    return ToolContext(cwd, resp_type)


async def _events(tool: ServerTool, params: dict, call: ToolContext):
    """One `data: {"chunk": ...}` event per piece of output, then `data: {"done": true}`
    (with "error" when the tool failed); no [DONE], as llama-server's."""
    done: dict = {"done": True}
    chunks = tool.stream(params, call)
    try:
        async for chunk in chunks:
            yield _event({"chunk": chunk})
    except ToolError as exc:
        done["error"] = str(exc)
    except OSError as exc:
        done["error"] = f"the tool failed: {exc.strerror or exc}"
    finally:
        await chunks.aclose()  # a client that left: the command is killed
    yield _event(done)


def _event(data: dict) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n\n"
