"""llama-server's resumable streams: a generation streamed with an `X-Conversation-Id`
header also writes its SSE bytes into a session kept under that id, and goes on
generating when its client goes away, so a client that reloads can read the stream
again from any byte offset (GET /v1/stream?conv_id=ID&from=N) while it still runs and
for a while after it ended.

- A session keeps the last MAX_BYTES of its stream (4 MiB, as llama-server); a read
  from an offset before that is refused (the client restarts).
- One conversation has at most one session: a new stream under the same id cancels
  the previous one's generation.
- DELETE /v1/stream?conv_id=ID cancels the generation and forgets the session.
- An ended session is forgotten TTL_S (300 s) after it ended; at most MAX_SESSIONS are
  kept, the oldest ended ones forgotten first.

Everything here runs on the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

MAX_BYTES = 4 * 1024 * 1024
TTL_S = 300.0
MAX_SESSIONS = 1024


class OffsetLost(Exception):
    """The bytes from that offset on are no longer held."""


class StreamSession:
    def __init__(self, conversation_id: str, max_bytes: int = MAX_BYTES) -> None:
        self.conversation_id = conversation_id
        self.started_at = int(time.time())
        self.completed_at = 0  # when the stream ended (0: still running)
        self.cancelled = False
        self.on_cancel: Callable[[], None] | None = None  # stops the generation writing into it, at once
        self._buffer = bytearray()
        self._dropped = 0  # bytes of the stream's start no longer held
        self._max_bytes = max_bytes
        self._changed = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.completed_at != 0 or self.cancelled

    @property
    def total_bytes(self) -> int:
        return self._dropped + len(self._buffer)

    @property
    def dropped(self) -> int:
        return self._dropped

    def append(self, data: bytes) -> None:
        if self.done or not data:
            return
        self._buffer += data
        excess = len(self._buffer) - self._max_bytes
        if excess > 0:
            del self._buffer[:excess]
            self._dropped += excess
        self._wake()

    def finish(self) -> None:
        if not self.completed_at:
            self.completed_at = int(time.time())
        self._wake()

    def cancel(self) -> None:
        """The generation writing into it stops (`on_cancel`, even while it prefills); readers end."""
        self.cancelled = True
        self.finish()
        stop, self.on_cancel = self.on_cancel, None
        if stop is not None:
            stop()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def read_from(self, offset: int) -> AsyncIterator[bytes]:
        """The stream's bytes from `offset` on, as they come, until it ends. OffsetLost
        when they are no longer held (at the start or later, for a reader that fell a
        whole MAX_BYTES behind)."""
        while True:
            if offset < self._dropped:
                raise OffsetLost(offset)
            if offset < self.total_bytes:
                chunk = bytes(self._buffer[offset - self._dropped:])
                offset += len(chunk)
                yield chunk
                continue
            if self.done:
                return
            await self._changed.wait()


class StreamSessions:
    def __init__(self, max_sessions: int = MAX_SESSIONS, ttl_s: float = TTL_S) -> None:
        self._sessions: dict[str, StreamSession] = {}
        self._max_sessions = max_sessions
        self._ttl_s = ttl_s

    def open(self, conversation_id: str) -> StreamSession:
        """A fresh session for the conversation; its previous one is cancelled."""
        previous = self._sessions.pop(conversation_id, None)
        if previous is not None:
            previous.cancel()
        self._collect(room=1)
        session = self._sessions[conversation_id] = StreamSession(conversation_id)
        return session

    def get(self, conversation_id: str) -> StreamSession | None:
        self._collect()
        return self._sessions.get(conversation_id)

    def lookup(self, conversation_ids: list[str]) -> list[StreamSession]:
        """The sessions of these conversations: each id's own, and its per-model ones
        (`ID::MODEL`, as llama-server's router keys them)."""
        self._collect()
        found = []
        for wanted in conversation_ids:
            prefix = wanted + "::"
            found += [s for key, s in self._sessions.items() if key == wanted or key.startswith(prefix)]
        return found

    def cancel(self, conversation_id: str) -> None:
        session = self._sessions.pop(conversation_id, None)
        if session is not None:
            session.cancel()

    def close(self) -> None:
        """At shutdown: every reader ends."""
        for session in self._sessions.values():
            session.finish()
        self._sessions.clear()

    def __len__(self) -> int:
        return len(self._sessions)

    def _collect(self, room: int = 0) -> None:
        """Forget sessions that ended TTL_S ago, then the oldest ended ones past
        MAX_SESSIONS (less `room` for those about to be opened)."""
        cutoff = time.time() - self._ttl_s
        for key in [k for k, s in self._sessions.items() if s.completed_at and s.completed_at <= cutoff]:
            del self._sessions[key]
        excess = len(self._sessions) + room - self._max_sessions
        if excess > 0:
            ended = sorted((s for s in self._sessions.values() if s.completed_at), key=lambda s: s.completed_at)
            for session in ended[:excess]:
                del self._sessions[session.conversation_id]
