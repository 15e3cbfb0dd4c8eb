"""A chunked response of raw bytes that watches for the client going away while it
streams, so abandoned speech stops at once rather than at its next send. A failure
after the headers went out ends the response without its final chunk (the server
then closes the connection), so a client cannot take a cut-off file for a whole one."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mlxcel.turn.errors import TurnError

log = logging.getLogger("mlxcel.server")


class ByteStreamResponse(Response):
    def __init__(self, chunks: AsyncIterator[bytes], media_type: str, headers: dict[str, str],
                 on_close: Callable[[], None] | None = None) -> None:
        self._chunks = chunks
        self._on_close = on_close
        self.status_code = 200
        self.background = None
        self.body = b""
        self.raw_headers = [(b"content-type", media_type.encode()), (b"cache-control", b"no-cache"),
                            (b"x-accel-buffering", b"no")]
        self.raw_headers += [(k.lower().encode(), v.encode()) for k, v in headers.items()]

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
                async for chunk in self._chunks:
                    if chunk:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                pass  # the client went away mid-send
            except TurnError as exc:  # no final chunk: the connection is closed, the client sees a cut stream
                log.warning("audio stream broken off: %s", exc.message)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._chunks.aclose()
                if self._on_close is not None:
                    self._on_close()
                tasks.cancel_scope.cancel()
