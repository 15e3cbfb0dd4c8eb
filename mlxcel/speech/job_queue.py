"""The queue between an audio route and its worker thread: at most --audio-queue-depth
jobs wait beside the one that runs; beyond that a submit is a 503 the client retries.
A waiting job whose client left (its `cancelled` event set) gives its place back at
once and is never run. Both speech workers (whisper, piper) take their jobs from one."""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, Protocol, TypeVar

from mlxcel.turn.errors import ServerBusy


class Job(Protocol):
    cancelled: threading.Event


J = TypeVar("J", bound=Job)


class JobQueue(Generic[J]):
    def __init__(self, depth: int, what: str) -> None:
        self.depth = depth
        self.what = what  # names the queue in its 503s: "speech-to-text", "speech"
        self._waiting: deque[J] = deque()
        self._wake = threading.Condition()
        self._running: J | None = None
        self._closed = False

    @property
    def waiting(self) -> int:
        with self._wake:
            self._drop_cancelled()
            return len(self._waiting)

    @property
    def outstanding(self) -> int:
        """Jobs waiting (their clients still there) and the one running."""
        with self._wake:
            self._drop_cancelled()
            return len(self._waiting) + (self._running is not None)

    def put(self, job: J) -> None:
        """Queue `job`; ServerBusy (503) when closed or when `depth` jobs already wait."""
        with self._wake:
            self._refuse_when_full()
            self._waiting.append(job)
            self._wake.notify()

    def check_room(self) -> None:
        """ServerBusy (503) now when a job put now would be refused: a route asks before
        its costly preparation, so a flood is turned away without paying for each (put
        asks again: places may fill meanwhile)."""
        with self._wake:
            self._refuse_when_full()

    def take(self) -> J | None:
        """On the worker thread: the next job whose client is still there, marked as
        running until `done`; None once the queue is closed."""
        with self._wake:
            self._running = None
            while True:
                while not self._waiting and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return None
                job = self._waiting.popleft()
                if not job.cancelled.is_set():
                    self._running = job
                    return job

    def done(self) -> None:
        """On the worker thread: the running job has ended."""
        with self._wake:
            self._running = None

    def close(self, cancel_running: bool = False) -> list[J]:
        """Refuse new jobs and wake the worker so that its `take` returns None. Returns
        the jobs that were waiting (cancelled, for the caller to answer); the running one
        is cancelled too when asked."""
        with self._wake:
            self._closed = True
            abandoned, self._waiting = list(self._waiting), deque()
            if cancel_running and self._running is not None:
                self._running.cancelled.set()
            self._wake.notify_all()
        for job in abandoned:
            job.cancelled.set()
        return abandoned

    def reopen(self) -> None:
        """Accept jobs again (a worker that stopped to sleep starts afresh)."""
        with self._wake:
            self._closed = False

    def _refuse_when_full(self) -> None:
        if self._closed:
            raise ServerBusy(f"the {self.what} worker is shutting down")
        self._drop_cancelled()
        if len(self._waiting) >= self.depth:
            raise ServerBusy(f"the {self.what} queue is full ({self.depth} requests waiting, --audio-queue-depth); "
                             "try again later", code="audio_queue_full", retry_after=1)

    def _drop_cancelled(self) -> None:
        if any(job.cancelled.is_set() for job in self._waiting):
            self._waiting = deque(job for job in self._waiting if not job.cancelled.is_set())
