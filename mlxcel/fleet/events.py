"""Model status changes as llama-server's router announces them on GET /models/sse:
`{"model": ID, "event": "model_status", "data": {"status": "loading" | "loaded" |
"unloaded", ...}}`, and `{"model": "*", "event": "models_reload"}` when the list is
read again. Any thread publishes; each listener is a stream on an event loop, holding at
most MAX_PENDING events its client has not read (past that its stream ends, and the
client reconnects and reads GET /models again). When the server stops, every stream
ends after the events already queued (end_streams), so the shutdown does not wait
for these never-ending streams and then cancel them."""

from __future__ import annotations

import asyncio
import threading

MAX_PENDING = 256


class Listener:
    def __init__(self, events: FleetEvents, loop: asyncio.AbstractEventLoop) -> None:
        self._events = events
        self._loop = loop
        self._queue: asyncio.Queue[dict | None] = asyncio.Queue()
        self._ended = False

    def push(self, event: dict) -> None:
        """From any thread."""
        try:
            self._loop.call_soon_threadsafe(self._deliver, event)
        except RuntimeError:  # the loop is closed: nobody reads this listener any more
            self.close()

    def _deliver(self, event: dict) -> None:
        if self._ended:
            return
        if self._queue.qsize() >= MAX_PENDING:
            self._finish()  # its reader fell too far behind
            return
        self._queue.put_nowait(event)

    def end(self) -> None:
        """From any thread: the stream ends once the events queued before this are read."""
        try:
            self._loop.call_soon_threadsafe(self._finish)
        except RuntimeError:  # the loop is closed
            self.close()

    def _finish(self) -> None:
        if not self._ended:
            self._ended = True
            self.close()
            self._queue.put_nowait(None)  # the end of this stream

    async def next(self) -> dict | None:
        """The next event, or None once the stream has ended."""
        return await self._queue.get()

    def close(self) -> None:
        self._events.unsubscribe(self)


class FleetEvents:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: set[Listener] = set()

    def subscribe(self) -> Listener:
        """A listener of the running loop."""
        listener = Listener(self, asyncio.get_running_loop())
        with self._lock:
            self._listeners.add(listener)
        return listener

    def unsubscribe(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.discard(listener)

    def end_streams(self) -> None:
        """Every listener's stream ends (the server is stopping)."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener.end()

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    def publish(self, model: str, event: str, data: dict | None = None) -> None:
        message = {"model": model, "event": event, **({"data": data} if data is not None else {})}
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener.push(message)

    def status(self, model: str, status: str, **extra) -> None:
        self.publish(model, "model_status", {"status": status, **extra})
