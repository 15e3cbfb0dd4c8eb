"""exec_shell_command and get_info. A command runs in its own process group under
`sh -c`, with a deadline; on the deadline, or when the caller goes away, the whole group
is killed."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import platform
import signal
import subprocess
from collections.abc import AsyncIterator

from mlxcel.toolbox.base import RUNNING_GROUPS, ServerTool, ToolContext, ToolError

OUTPUT_MAX = 16 * 1024
TIMEOUT_MAX = 60
EXIT_POLL_SECONDS = 0.01


class ExecShellCommand(ServerTool):
    name = "exec_shell_command"
    display_name = "Execute shell command"
    writes = True
    streams = True
    description = "Execute a shell command and return its output (stdout and stderr combined)."
    properties = {
        "command": {"type": "string", "description": "Shell command to execute"},
        "timeout": {"type": "integer", "description": f"Timeout in seconds (default 10, max {TIMEOUT_MAX})"},
        "max_output_size": {"type": "integer", "description": f"Maximum output size in bytes (default {OUTPUT_MAX})"},
    }
    required = ("command",)

    async def invoke(self, params: dict, call: ToolContext) -> dict:
        parts = [chunk async for chunk in self.stream(params, call)]
        return {"plain_text_response": "".join(parts)}

    async def stream(self, params: dict, call: ToolContext) -> AsyncIterator[str]:
        """The output as it comes (cut at max_output_size, the rest drained), then
        "[exit code: N]"; closing the iterator early kills the command."""
        if "\x00" in params["command"]:  # no program's argument can hold one
            raise ToolError("command must not hold a NUL character")
        timeout = max(1, min(params.get("timeout", 10), TIMEOUT_MAX))
        limit = max(1, min(params.get("max_output_size", OUTPUT_MAX), OUTPUT_MAX))
        # the standard library's spawn, not the event loop's: uvloop's hands the child copies of
        # its output pipe (and every inheritable descriptor), so a job the command leaves running
        # with its output elsewhere (`server > log 2>&1 &`) would hold the answer until the deadline
        child = subprocess.Popen(["sh", "-c", params["command"]], cwd=call.cwd, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        RUNNING_GROUPS.add(child.pid)
        output = child.stdout.fileno()
        os.set_blocking(output, False)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        timed_out = False
        sent = 0
        decoder = codecs.getincrementaldecoder("utf-8")("replace")  # reads can split a character
        try:
            while True:
                left = deadline - loop.time()
                if left <= 0:
                    timed_out = True
                    break
                try:
                    data = await asyncio.wait_for(_read(output), left)
                except asyncio.TimeoutError:
                    timed_out = True
                    break
                if not data:
                    break
                if sent < limit:
                    piece = data[:limit - sent]
                    sent += len(piece)
                    text = decoder.decode(piece, sent >= limit)
                    if text:
                        yield text
                    if sent >= limit:
                        yield "\n[output truncated]"
            if not timed_out:  # a command that closed its output may still run: the same deadline holds
                try:
                    await asyncio.wait_for(_exit_code(child), max(deadline - loop.time(), EXIT_POLL_SECONDS))
                except asyncio.TimeoutError:
                    timed_out = True
            if timed_out:
                _kill(child)
            code = await _exit_code(child)
            yield f"\n[exit code: {code}]" + (" [exit due to timed out]" if timed_out else "")
        finally:
            if child.poll() is None:  # the caller left, or the deadline passed
                _kill(child)
                await _exit_code(child)
            RUNNING_GROUPS.discard(child.pid)
            child.stdout.close()


async def _read(fd: int) -> bytes:
    """Up to 4096 bytes of the non-blocking pipe `fd` once it has some (b"" at its end)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            return os.read(fd, 4096)
        except BlockingIOError:
            pass
        readable = loop.create_future()
        loop.add_reader(fd, lambda: readable.done() or readable.set_result(None))
        try:
            await readable
        finally:
            loop.remove_reader(fd)


async def _exit_code(child: subprocess.Popen) -> int:
    """Once the command's output has ended (or it was killed) it exits at once: polled."""
    while (code := child.poll()) is None:
        await asyncio.sleep(EXIT_POLL_SECONDS)
    return code


def _kill(child: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)


class GetInfo(ServerTool):
    name = "get_info"
    display_name = "Get Runtime Info"
    description = "Returns runtime info: the OS name/version and the current working directory"
    properties: dict = {}

    async def invoke(self, params: dict, call: ToolContext) -> dict:
        u = platform.uname()
        return {"os": f"{u.system} {u.node} {u.release} {u.version} {u.machine}".strip(),
                "cwd": call.cwd or os.getcwd()}
