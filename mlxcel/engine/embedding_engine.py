"""The embedding engine thread: owns the embedding runtime and batches every input.

A job is one request's inputs (token lists). Inputs of all waiting jobs go into
one decode as separate sequences, up to the runtime's ubatch of tokens and its
sequences per decode. Jobs are taken highest priority first, then the job with the
fewest inputs left (a one-sentence request is not stuck behind a 512-input one),
then the oldest; a job that has waited AGING_S is taken by age alone, so none
starves. A job finishes, on its `done` callback, once every input has come back.

step() = take inputs from the queue into a batch → runtime.embed → hand out rows.

Callers (the rerank routes too) use `submit(EmbeddingJob(inputs, done, priority))`:
`done(vectors, None)` gets one array per input (the pooled vector, the rank
scores, or with pooling none one row per token), `done(None, error)` a message.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from mlxcel.engine.compute_gate import COMPUTE_GATE, ComputeGate
from mlxcel.engine.engine_control import EngineStoppedError, QueueFullError
from mlxcel.engine.faults import EngineFailedError
from mlxcel.engine.request import Priority

log = logging.getLogger("mlxcel.embedding")

AGING_S = 0.5  # a job waiting this long goes by arrival, ahead of shorter newer ones
Done = Callable[[list[np.ndarray] | None, str | None], None]
_job_ids = itertools.count(1)


class EmbeddingModel(Protocol):
    """What the engine needs of a runtime (EmbeddingRuntime, or a test's fake)."""

    n_ubatch: int
    n_seq_max: int

    def embed(self, inputs: list[list[int]]) -> list[np.ndarray]: ...


@dataclass(eq=False)
class EmbeddingJob:
    inputs: list[list[int]]  # each non-empty and at most n_ubatch tokens
    done: Done  # called once, on the engine thread
    priority: Priority = Priority.NORMAL
    id: int = field(default_factory=lambda: next(_job_ids))
    results: list[np.ndarray | None] = field(init=False)
    n_left: int = field(init=False)
    cancelled: bool = False
    next: int = field(init=False, default=0)  # the first input not yet taken into a decode
    queued_at: float = field(init=False, default=0.0)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.inputs)
        self.n_left = len(self.inputs)

    def order(self, now: float) -> tuple:
        aged = now - self.queued_at >= AGING_S
        return int(self.priority), 0 if aged else len(self.inputs) - self.next, self.id


@dataclass(frozen=True)
class EmbeddingStats:
    jobs_done: int = 0
    inputs_done: int = 0
    tokens_done: int = 0
    decodes: int = 0

    def __add__(self, other: EmbeddingStats) -> EmbeddingStats:
        return EmbeddingStats(self.jobs_done + other.jobs_done, self.inputs_done + other.inputs_done,
                              self.tokens_done + other.tokens_done, self.decodes + other.decodes)


class _Stop:
    pass


# A decode cannot be interrupted, so its length is the wait a newly arrived request
# sees. While interactive requests (a query or two at a time) keep arriving, decodes
# hold at most STEP_TOKENS tokens (an input longer than that still goes, alone); with
# only bulk requests, they fill the ubatch, which batches best.
STEP_TOKENS = int(os.environ.get("MLXCEL_EMBED_STEP_TOKENS", "128"))
INTERACTIVE_INPUTS = 2  # a job this small is someone waiting on an answer
INTERACTIVE_WINDOW_S = 2.0  # how long after one arrives decodes stay short


class EmbeddingEngine:
    def __init__(self, runtime: EmbeddingModel, queue_cap: int = 64, step_tokens: int = STEP_TOKENS,
                 gate: ComputeGate = COMPUTE_GATE) -> None:
        self.runtime = runtime
        self.gate = gate  # shared with the process's other engines: one computes at a time
        self.queue_cap = queue_cap
        self.step_tokens = max(1, min(step_tokens, runtime.n_ubatch))
        self._interactive_at = -1e9  # when the last interactive job was queued
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._pending: list[EmbeddingJob] = []  # jobs with inputs not yet taken into a decode
        self._admission = threading.Lock()
        self._outstanding = 0  # jobs submitted and not yet done
        self._stopped = False
        self.failure: str | None = None
        self.stats = EmbeddingStats()
        self._thread = threading.Thread(target=self._run, name="mlxcel-embedding", daemon=True)

    # -- called from other threads ------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    @property
    def queue_depth(self) -> int:
        return self._outstanding

    def submit(self, job: EmbeddingJob) -> None:
        """Queue a job, or raise at once: QueueFullError past the queue cap (one job
        runs, queue_cap wait), EngineFailedError once the engine failed,
        EngineStoppedError while it shuts down."""
        for tokens in job.inputs:
            if not tokens or len(tokens) > self.runtime.n_ubatch:
                raise ValueError(f"an input of {len(tokens)} tokens cannot be embedded (1..{self.runtime.n_ubatch})")
        with self._admission:
            if self.failure is not None:
                raise EngineFailedError(self.failure)
            if self._stopped:
                raise EngineStoppedError("the embedding engine is shutting down")
            if self._outstanding > self.queue_cap:
                raise QueueFullError("the embedding queue is full")
            self._outstanding += 1
            self._inbox.put(job)

    def cancel(self, job: EmbeddingJob) -> None:
        """Its inputs not yet decoded are dropped; `done` is still called once."""
        job.cancelled = True

    def stop(self, timeout: float = 5.0) -> None:
        with self._admission:
            self._stopped = True
        self._inbox.put(_Stop())
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and self.failure is None

    # -- the engine thread ----------------------------------------------------------------

    def _run(self) -> None:
        failure = None
        self.gate.join()
        try:
            while self._drain_inbox(block=not self._pending):
                if self._pending:
                    self._step()
        except Exception as exc:  # noqa: BLE001 - the thread broke: fail everything it holds
            log.exception("embedding engine crashed")
            failure = f"the embedding engine crashed: {type(exc).__name__}: {exc}"
        finally:
            self.gate.leave()
            self._shut_down(failure)

    def _drain_inbox(self, block: bool) -> bool:
        """Queue every submitted job (waiting for one when blocking); False on stop."""
        try:
            command = self._inbox.get() if block else self._inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            if isinstance(command, _Stop):
                return False
            command.queued_at = time.monotonic()
            if len(command.inputs) <= INTERACTIVE_INPUTS:
                self._interactive_at = command.queued_at
            self._pending.append(command)
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                return True

    def plan(self) -> list[tuple[EmbeddingJob, int]]:
        """The next decode's inputs, as many as fit the ubatch and the sequences per
        decode, taken job by job in `EmbeddingJob.order` and, within a job, in order.
        Cancelled jobs leave the queue (and finish)."""
        for job in [job for job in self._pending if job.cancelled]:
            self._drop(job)
        self._pending.sort(key=lambda job: job.order(time.monotonic()))
        chosen: list[tuple[EmbeddingJob, int]] = []
        n_tokens = 0
        interactive = time.monotonic() - self._interactive_at < INTERACTIVE_WINDOW_S
        limit = self.step_tokens if interactive else self.runtime.n_ubatch
        for job in self._pending:
            while job.next < len(job.inputs) and len(chosen) < self.runtime.n_seq_max:
                size = len(job.inputs[job.next])
                if n_tokens + size > (limit if chosen else self.runtime.n_ubatch):
                    break
                chosen.append((job, job.next))
                n_tokens += size
                job.next += 1
            if job.next < len(job.inputs):
                break  # in order: what is next does not fit, and nothing behind it passes it
        self._pending = [job for job in self._pending if job.next < len(job.inputs)]
        return chosen

    def _drop(self, job: EmbeddingJob) -> None:
        """A cancelled job's inputs not yet taken are dropped; it finishes once those
        already in a decode are back."""
        self._pending.remove(job)
        for index in range(job.next, len(job.inputs)):
            self._settle(job, index, None)
        job.next = len(job.inputs)

    def _step(self) -> None:
        chosen = self.plan()
        if not chosen:
            return
        inputs = [job.inputs[index] for job, index in chosen]
        try:
            with self.gate.hold():  # the decode and the reads of its embeddings
                rows = self.runtime.embed(inputs)
        except Exception as exc:  # noqa: BLE001 - these inputs fail, the engine goes on
            log.error("embedding decode of %d inputs failed", len(inputs), exc_info=exc)
            for job, _ in chosen:
                self._fail(job, f"embedding failed: {type(exc).__name__}: {exc}")
            return
        stats = self.stats
        self.stats = EmbeddingStats(stats.jobs_done, stats.inputs_done + len(inputs),
                                    stats.tokens_done + sum(map(len, inputs)), stats.decodes + 1)
        for (job, index), row in zip(chosen, rows):
            self._settle(job, index, row)

    def _settle(self, job: EmbeddingJob, index: int, row: np.ndarray | None) -> None:
        if job.n_left <= 0:  # already failed
            return
        job.results[index] = row
        job.n_left -= 1
        if job.n_left == 0:
            if job.cancelled:
                self._finish(job, None, "cancelled")
            else:
                self._finish(job, list(job.results), None)

    def _fail(self, job: EmbeddingJob, message: str) -> None:
        if job.n_left <= 0:
            return
        job.n_left = 0
        if job in self._pending:
            self._pending.remove(job)
        self._finish(job, None, message)

    def _finish(self, job: EmbeddingJob, rows: list[np.ndarray] | None, error: str | None) -> None:
        with self._admission:
            self._outstanding -= 1
        if rows is not None:
            s = self.stats
            self.stats = EmbeddingStats(s.jobs_done + 1, s.inputs_done, s.tokens_done, s.decodes)
        try:
            job.done(rows, error)
        except Exception:  # noqa: BLE001 - a broken callback is the caller's, not the engine's
            log.exception("an embedding job's callback failed")

    def _shut_down(self, failure: str | None) -> None:
        with self._admission:
            self._stopped = True
            if failure is not None:
                self.failure = failure
        while True:
            try:
                command = self._inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(command, EmbeddingJob):
                self._pending.append(command)
        message = failure or "the server is shutting down"
        for job in list(self._pending):
            self._fail(job, message)
