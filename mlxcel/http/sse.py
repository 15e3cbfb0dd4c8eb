"""Server-Sent Events: a response that watches for the client going away while it
streams, so an abandoned generation is cancelled at once, not at its next token."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

Item = TypeVar("Item")


def keepalive_seconds(interval: int) -> float | None:
    """The server's keepalive interval (--sse-ping-interval, or MLXCEL_SSE_KEEPALIVE_S;
    30 s by default, as llama-server): None when turned off (<= 0)."""
    return float(interval) if interval > 0 else None


def sse_data(payload: dict | str) -> str:
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n"


def sse_event(name: str, payload: dict) -> str:
    """A named event (`event: NAME`), as Anthropic's streams frame theirs."""
    return f"event: {name}\n{sse_data(payload)}"


async def with_heartbeat(source: AsyncIterator[Item], interval: float) -> AsyncIterator[Item | None]:
    """The items of `source`, and None each time `interval` seconds pass without one
    (a timer on the pending item, not a poll). Closing this closes `source`."""
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(source.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield None
                continue
            item, pending = pending, None
            try:
                value = item.result()
            except StopAsyncIteration:
                return
            yield value
    finally:
        with anyio.CancelScope(shield=True):  # closing runs even in a cancelled scope
            if pending is not None:
                pending.cancel()  # thrown into the source, which closes on it
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending
            await source.aclose()


class EventStreamResponse(Response):
    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterator[str],
        status_code: int = 200,
        on_close: Callable[[], None] | None = None,
        ping_seconds: float | None = None,
    ) -> None:
        """`on_close` runs however the stream ends; it cancels what is still running
        (a generator that was never started runs no `finally` of its own).
        `ping_seconds`: an SSE comment (":") goes out whenever the stream has been
        silent that long (llama-server's sse_ping_interval), so idle-timeout clients
        and proxies keep the connection."""
        self._on_close = on_close
        self._ping_seconds = ping_seconds
        self.status_code = status_code
        self.background = None
        self.body = b""
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        self._events = events

    async def _framed(self) -> AsyncIterator[str]:
        if self._ping_seconds is None:
            async for event in self._events:
                yield event
            return
        async with contextlib.aclosing(with_heartbeat(self._events, self._ping_seconds)) as events:
            async for event in events:
                yield ":\n\n" if event is None else event

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tasks:

            async def watch_disconnect() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        tasks.cancel_scope.cancel()
                        return

            tasks.start_soon(watch_disconnect)
            try:
                await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
                async for event in self._framed():
                    await send({"type": "http.response.body", "body": event.encode("utf-8"), "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                pass  # the client went away mid-send
            finally:
                with anyio.CancelScope(shield=True):
                    await self._events.aclose()
                if self._on_close is not None:
                    self._on_close()
                tasks.cancel_scope.cancel()
