"""Server-Sent Events: a response that watches for the client going away while it
streams, so an abandoned generation is cancelled at once, not at its next token."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

Item = TypeVar("Item")
log = logging.getLogger("mlxcel.server")


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


class WatchedStreamResponse(Response):
    """A streamed response that watches for the client going away while it streams, so
    abandoned work is cancelled at once, not at its next send. Subclasses give the
    bytes (`_chunks`) and the iterator to close (`_source`). `on_close` runs however
    the stream ends; it cancels what is still running (a generator that was never
    started runs no `finally` of its own). An error of `broken_by` after the headers
    went out ends the response without its final chunk: the client sees a cut stream."""

    broken_by: tuple[type[BaseException], ...] = ()
    broken_note = "stream broken off"  # the log line's start when one breaks off

    def __init__(self, source: AsyncIterator, content_type: bytes, on_close: Callable[[], None] | None = None,
                 status_code: int = 200) -> None:
        self._source = source
        self._on_close = on_close
        self.status_code = status_code
        self.background = None
        self.body = b""
        self.raw_headers = [(b"content-type", content_type), (b"cache-control", b"no-cache"),
                            (b"x-accel-buffering", b"no")]

    def _chunks(self) -> AsyncIterator[bytes]:
        raise NotImplementedError

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
                async for chunk in self._chunks():
                    if chunk:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                pass  # the client went away mid-send
            except self.broken_by as exc:
                log.warning("%s: %s", self.broken_note, getattr(exc, "message", exc))
            finally:
                with anyio.CancelScope(shield=True):
                    await self._source.aclose()
                if self._on_close is not None:
                    self._on_close()
                tasks.cancel_scope.cancel()


class EventStreamResponse(WatchedStreamResponse):
    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterator[str],
        status_code: int = 200,
        on_close: Callable[[], None] | None = None,
        ping_seconds: float | None = None,
    ) -> None:
        """`ping_seconds`: an SSE comment (":") goes out whenever the stream has been
        silent that long (llama-server's sse_ping_interval), so idle-timeout clients
        and proxies keep the connection."""
        super().__init__(events, b"text/event-stream; charset=utf-8", on_close, status_code)
        self._ping_seconds = ping_seconds
        self._events = events

    async def _framed(self) -> AsyncIterator[str]:
        if self._ping_seconds is None:
            async for event in self._events:
                yield event
            return
        async with contextlib.aclosing(with_heartbeat(self._events, self._ping_seconds)) as events:
            async for event in events:
                yield ":\n\n" if event is None else event

    async def _chunks(self) -> AsyncIterator[bytes]:
        async for event in self._framed():
            yield event.encode("utf-8")
