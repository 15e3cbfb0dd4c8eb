"""Server-Sent Events: a response that watches for the client going away while it
streams, so an abandoned generation is cancelled at once, not at its next token."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send


def sse_data(payload: dict | str) -> str:
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"data: {text}\n\n"


class EventStreamResponse(Response):
    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[str], status_code: int = 200) -> None:
        self.status_code = status_code
        self.background = None
        self.body = b""
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
        ]
        self._events = events

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
                async for event in self._events:
                    await send({"type": "http.response.body", "body": event.encode("utf-8"), "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                pass  # the client went away mid-send
            finally:
                with anyio.CancelScope(shield=True):
                    await self._events.aclose()
                tasks.cancel_scope.cancel()
