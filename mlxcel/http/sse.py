"""Server-Sent Events: a response that watches for the client going away while it
streams, so an abandoned generation is cancelled at once, not at its next token."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mlxcel.http.stream_sessions import StreamSession

log = logging.getLogger("mlxcel.server")
CONVERSATION_HEADER = b"x-conversation-id"  # llama-server's resumable streams


def keepalive_seconds(interval: int) -> float | None:
    """The server's keepalive interval (--sse-ping-interval, or MLXCEL_SSE_KEEPALIVE_S;
    30 s by default, as llama-server): None when turned off (<= 0)."""
    return float(interval) if interval > 0 else None


# one encoder for every chunk: json.dumps with these options builds a new one per call,
# which was half of a token chunk's encoding time
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def compact_json(payload: object) -> str:
    """JSON without spaces, non-ASCII text as it is: what every stream chunk carries."""
    return _ENCODER.encode(payload)


def sse_data(payload: dict | str) -> str:
    text = payload if isinstance(payload, str) else compact_json(payload)
    return f"data: {text}\n\n"


def sse_event(name: str, payload: dict) -> str:
    """A named event (`event: NAME`), as Anthropic's streams frame theirs."""
    return f"event: {name}\n{sse_data(payload)}"


@dataclass(frozen=True)
class Keepalive:
    """What a stream sends once it has been silent for `interval` seconds: an SSE
    comment (llama-server's sse_ping_interval), or an API's own ping event, which may
    only follow the stream's first chunk (Anthropic's comes after message_start)."""

    interval: float
    payload: bytes
    after_first_chunk: bool = False


def comment_keepalive(interval: float | None) -> tuple[Keepalive, ...]:
    return () if interval is None else (Keepalive(interval, b":\n\n"),)


class _StreamState:
    """What a stream's senders share: one send at a time (a ping never lands inside
    or after the last chunk), when the stream last sent anything, and whether its
    client is gone while a resumable stream goes on into its session."""

    __slots__ = ("chunks", "detached", "done", "last_sent", "lock")

    def __init__(self, now: float) -> None:
        self.lock = asyncio.Lock()
        self.last_sent = now
        self.chunks = 0
        self.done = False
        self.detached = False


class WatchedStreamResponse(Response):
    """A streamed response that watches for the client going away while it streams, so
    abandoned work is cancelled at once, not at its next send. The source's items
    become bytes by `_encode` (a subclass's; bytes as they are here). `on_close` runs however
    the stream ends; it cancels what is still running (a generator that was never
    started runs no `finally` of its own). An error of `broken_by` after the headers
    went out ends the response without its final chunk: the client sees a cut stream.
    Each of `keepalives` runs on a timer of its own beside the stream, so a chunk
    costs nothing for them (wrapping every chunk's wait in a timeout cost about 0.2 ms
    of event-loop CPU a token).

    A `resumable` stream (a generation's) whose request carries `X-Conversation-Id`
    also writes its bytes into that conversation's session (stream_sessions.py) and,
    when its client goes away, goes on into the session alone; cancelling the session
    (DELETE /v1/stream, or a new stream of the conversation) ends it."""

    broken_by: tuple[type[BaseException], ...] = ()
    broken_note = "stream broken off"  # the log line's start when one breaks off

    def __init__(self, source: AsyncIterator, content_type: bytes, on_close: Callable[[], None] | None = None,
                 status_code: int = 200, keepalives: tuple[Keepalive, ...] = (), resumable: bool = False) -> None:
        self._source = source
        self._on_close = on_close
        self._keepalives = keepalives
        self._resumable = resumable
        self.status_code = status_code
        self.background = None
        self.body = b""
        self.raw_headers = [(b"content-type", content_type), (b"cache-control", b"no-cache"),
                            (b"x-accel-buffering", b"no")]

    @staticmethod
    def _encode(item) -> bytes:
        """The bytes of one item of the source (the source's items are bytes here)."""
        return item

    def _session(self, scope: Scope) -> StreamSession | None:
        if not self._resumable:
            return None
        conversation = next((v for k, v in scope.get("headers", ()) if k.lower() == CONVERSATION_HEADER), None)
        app = scope.get("app")
        sessions = getattr(getattr(app, "state", None), "stream_sessions", None)
        if not conversation or sessions is None:
            return None
        session = sessions.open(conversation.decode("latin-1"))
        session.on_cancel = self._on_close  # cancels the generation (it may run again when the stream ends)
        return session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        failure: list[Exception] = []
        session = self._session(scope)
        state = _StreamState(asyncio.get_running_loop().time())
        async with anyio.create_task_group() as tasks:

            async def watch_disconnect() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        if session is None:
                            tasks.cancel_scope.cancel()
                        else:  # the generation goes on into its session
                            state.detached = True
                        return

            tasks.start_soon(watch_disconnect)
            # the chunks are pumped by a task of their own: a token wakes that task alone,
            # not the request's task, whose every middleware frame each wake-up resumes
            tasks.start_soon(self._pump, send, tasks, failure, state, session)
        if failure:
            raise failure[0]

    async def _pump(self, send: Send, tasks: TaskGroup, failure: list[Exception], state: _StreamState,
                    session: StreamSession | None) -> None:
        loop = asyncio.get_running_loop()
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            for keepalive in self._keepalives:
                tasks.start_soon(self._keep_alive, keepalive, state, send)
            encode = self._encode
            async for item in self._source:
                chunk = encode(item)
                if session is not None:
                    if session.cancelled:
                        break
                    session.append(chunk)
                    if state.detached:
                        continue
                if chunk:
                    try:
                        async with state.lock:
                            await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    except OSError:
                        if session is None:
                            raise
                        state.detached = True
                        continue
                    state.last_sent = loop.time()
                    state.chunks += 1
            async with state.lock:
                state.done = True
                if not state.detached:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-send
        except self.broken_by as exc:
            log.warning("%s: %s", self.broken_note, getattr(exc, "message", exc))
        except Exception as exc:  # noqa: BLE001 - raised again by __call__, once the group has ended
            failure.append(exc)
        finally:
            state.done = True
            if session is not None:
                session.finish()
            with anyio.CancelScope(shield=True):
                await self._source.aclose()
            if self._on_close is not None:
                self._on_close()
            tasks.cancel_scope.cancel()

    @staticmethod
    async def _keep_alive(keepalive: Keepalive, state: _StreamState, send: Send) -> None:
        """Sends `keepalive` whenever the stream has sent nothing for its interval: a
        timer beside the stream, so a chunk costs nothing for it."""
        loop = asyncio.get_running_loop()
        while not state.done and not state.detached:
            wait = state.last_sent + keepalive.interval - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            if keepalive.after_first_chunk and not state.chunks:
                await asyncio.sleep(keepalive.interval)
                continue
            async with state.lock:
                if state.done or state.detached:
                    return
                try:
                    await send({"type": "http.response.body", "body": keepalive.payload, "more_body": True})
                except OSError:
                    return  # the client went away: the stream ends on its own
            state.last_sent = loop.time()


class EventStreamResponse(WatchedStreamResponse):
    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncIterator[str],
        status_code: int = 200,
        on_close: Callable[[], None] | None = None,
        ping_seconds: float | None = None,
        keepalives: tuple[Keepalive, ...] = (),
        resumable: bool = False,
    ) -> None:
        """`ping_seconds`: an SSE comment (":") goes out whenever the stream has been
        silent that long (llama-server's sse_ping_interval), so idle-timeout clients
        and proxies keep the connection; `keepalives` are an API's own on top;
        `resumable`: a generation's stream, kept for a reconnecting client (above)."""
        super().__init__(events, b"text/event-stream; charset=utf-8", on_close, status_code,
                         comment_keepalive(ping_seconds) + keepalives, resumable)

    @staticmethod
    def _encode(item: str) -> bytes:
        return item.encode("utf-8")
