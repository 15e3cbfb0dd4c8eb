"""A lean reader of a server's streamed answer: one POST on a connection of its own,
the HTTP/1.1 framing read by hand, each SSE `data:` payload handed over with the time
its bytes arrived.

The benchmarks run the client on the cores the servers compute on, so what the client
spends per token is taken from both servers' steps. httpx's streaming (`aiter_lines`
over httpcore and h11) cost 0.40 ms of CPU a token on SmolLM2 streams here, 5 % of an
8 ms step; this reader costs a tenth of that (bench/README.md). Both servers are read
by it alike."""
from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit


class HTTPStatusError(RuntimeError):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text}")
        self.status = status


async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    status_line = await reader.readline()
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        raise RuntimeError(f"not an HTTP response: {status_line[:80]!r}")
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _bodies(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[bytes]:
    """The body's pieces as they arrive: chunked framing undone, else read to the end."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size = int((await reader.readline()).split(b";", 1)[0], 16)
            if size == 0:
                return
            piece = await reader.readexactly(size + 2)
            yield piece[:-2]
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"]))
    else:
        while piece := await reader.read(1 << 16):
            yield piece


async def post_events(url: str, path: str, body: dict,
                      headers: dict[str, str] | None = None) -> AsyncIterator[tuple[float, bytes]]:
    """POST `body` as JSON; yield (perf_counter() when the bytes arrived, payload) for
    each `data:` line of the answer. A status other than 200 raises HTTPStatusError."""
    where = urlsplit(url)
    reader, writer = await asyncio.open_connection(where.hostname, where.port, limit=1 << 22)
    try:
        data = json.dumps(body).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        writer.write((f"POST {path} HTTP/1.1\r\nHost: {where.hostname}:{where.port}\r\n"
                      f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                      f"Content-Length: {len(data)}\r\nConnection: close\r\n{extra}\r\n").encode() + data)
        status, response_headers = await _head(reader)
        if status != 200:
            text = b"".join([piece async for piece in _bodies(reader, response_headers)])
            raise HTTPStatusError(status, text.decode(errors="replace")[:500])
        pending = b""
        async for piece in _bodies(reader, response_headers):
            now = time.perf_counter()
            pending += piece
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.startswith(b"data:"):
                    yield now, line[5:].strip()
    finally:
        writer.close()
