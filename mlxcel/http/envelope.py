"""An HTTP request as a value (picklable): what crosses from the cluster's gateway to a
replica, or what a route dispatches to another route of the same app (Vertex AI's
predict route); `play` runs it through an ASGI application.

The replica's answer comes back as a stream of parts: first a `ResponseStart`
(status and headers), then body bytes. Whatever the application sent at once is
joined into one part, so a fast token stream does not cost one remote call per
event. Closing the stream early (the client went away, the gateway cancelled) is
an `http.disconnect` for the application: the engine frees the slot as it does
for a client of a single server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class HttpEnvelope:
    method: str
    path: str  # the raw path, without the query string
    query_string: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    client: tuple[str, int] | None = None
    scheme: str = "http"

    def header(self, name: str) -> str | None:
        key = name.lower().encode("latin-1")
        for k, v in self.headers:
            if k.lower() == key:
                return v.decode("latin-1")
        return None

    def with_json(self, method: str, path: str, payload: Any) -> HttpEnvelope:
        """The same client's request, with its headers (its key), sending `payload` as
        JSON to another route."""
        body = json.dumps(payload).encode()
        headers = [(k, v) for k, v in self.headers if k.lower() not in (b"content-length", b"content-type")]
        return dataclasses.replace(self, method=method, path=path, query_string=b"", body=body, headers=[
            *headers, (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())])

    def scope(self) -> dict[str, Any]:
        return {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": self.method, "scheme": self.scheme, "path": self.path, "raw_path": self.path.encode(),
            "query_string": self.query_string, "root_path": "", "headers": list(self.headers),
            "client": self.client, "server": ("mlxcel-replica", 0),
        }


@dataclass
class ResponseStart:
    status: int
    headers: list[tuple[bytes, bytes]]


async def play(app: Callable, envelope: HttpEnvelope) -> AsyncIterator[ResponseStart | bytes]:
    """Run `envelope` through the ASGI `app`, yielding its response as parts."""
    parts: asyncio.Queue = asyncio.Queue()
    gone = asyncio.Event()
    body_sent = False
    done = object()

    async def receive() -> dict:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": envelope.body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if gone.is_set():
            raise OSError("the client went away")
        if message["type"] == "http.response.start":
            parts.put_nowait(ResponseStart(message["status"], list(message.get("headers", []))))
        elif message["type"] == "http.response.body" and message.get("body"):
            parts.put_nowait(bytes(message["body"]))

    async def run() -> None:
        try:
            await app(envelope.scope(), receive, send)
        finally:
            parts.put_nowait(done)

    task = asyncio.get_running_loop().create_task(run())
    try:
        while True:
            part = await parts.get()
            if part is done:
                break
            if isinstance(part, bytes):
                chunks = [part]
                while not parts.empty() and isinstance(parts._queue[0], bytes):  # noqa: SLF001 - join what is ready
                    chunks.append(parts.get_nowait())
                part = b"".join(chunks)
            yield part
        await task  # the application's own exception, if it raised
    finally:
        gone.set()
        if not task.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 5)
