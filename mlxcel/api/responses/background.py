"""Background responses: jobs on the server's event loop.

queued (admitted; compaction and the wait for a slot happen here) → in_progress (the
model produced its first token) → completed / incomplete / failed / cancelled. Only
the cancel route cancels a job; a client that goes away changes nothing. Admission is
bounded by a job count and a rough byte budget shared with the response store: past
either, create answers 429 rate_limit_exceeded. Active jobs are outside the store's
TTL and LRU; a finished job's object moves to the store. Whatever a job's run
raises, the job ends failed with an error object, and its body, like every body a
job shows, serializes as JSON, so polling it keeps answering.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mlxcel.api.responses.json_safe import json_safe
from mlxcel.api.responses.store_calls import in_store_thread
from mlxcel.turn.errors import RateLimited, TurnError

if TYPE_CHECKING:
    from mlxcel.api.responses.job_board import JobBoard
    from mlxcel.api.responses.response_run import ResponseRun

log = logging.getLogger("mlxcel.responses")


class JobStatus(str, enum.Enum):
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    INCOMPLETE = "incomplete"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINAL = {JobStatus.COMPLETED, JobStatus.INCOMPLETE, JobStatus.FAILED, JobStatus.CANCELLED}
MOVES = {
    JobStatus.QUEUED: {JobStatus.IN_PROGRESS, *FINAL},
    JobStatus.IN_PROGRESS: FINAL,
}


@dataclass
class Job:
    id: str
    size: int  # rough bytes, counted against the store's byte budget while active
    body: dict  # the response object as polling shows it (output [] until the end)
    status: JobStatus = JobStatus.QUEUED
    task: asyncio.Task | None = None
    on_final: list[Callable[[Job], None]] = field(default_factory=list)
    owner: str | None = None  # the API key's digest
    on_move: list[Callable[[Job], None]] = field(default_factory=list)  # after every move, before on_final

    def __post_init__(self) -> None:
        self.body = json_safe(self.body)

    def move(self, status: JobStatus, body: dict | None = None) -> bool:
        """Take a legal step of the state machine (False, and nothing changes, otherwise)."""
        if status not in MOVES.get(self.status, ()):
            return False
        self.status = status
        self.body = json_safe(body) if body is not None else {**self.body, "status": status.value}
        for callback in self.on_move:
            callback(self)
        if status in FINAL:
            for callback in self.on_final:
                callback(self)
        return True

    @property
    def finished(self) -> bool:
        return self.status in FINAL


def rate_limited(message: str) -> RateLimited:
    return RateLimited(message, "rate_limit_exceeded")


class BackgroundJobs:
    def __init__(self, max_jobs: int, max_bytes: int, board: JobBoard | None = None) -> None:
        self.max_jobs = max_jobs
        self.max_bytes = max_bytes
        self.board = board
        self._active: dict[str, Job] = {}

    @property
    def active_bytes(self) -> int:
        return sum(job.size for job in self._active.values())

    def admit(self, job_id: str, size: int, body: dict, owner: str | None = None) -> Job:
        if len(self._active) >= self.max_jobs:
            raise rate_limited(f"{self.max_jobs} background responses are already active; retry when one finishes")
        if self.active_bytes + size > self.max_bytes:
            raise rate_limited("active background responses fill the response store's byte budget; "
                               "retry when one finishes")
        job = Job(job_id, size, body, owner=owner)
        job.on_final.append(lambda j: self._active.pop(j.id, None))
        if self.board is not None:
            job.on_move.append(self.board.publish)
        self._active[job_id] = job
        return job

    def announce(self, job: Job) -> concurrent.futures.Future | None:
        """Queue the job's first record (its later changes are queued after it, in order);
        its creation is answered once the future is done, so that a poll on any server
        sharing the store finds it at once."""
        return self.board.publish(job) if self.board is not None else None

    def get(self, job_id: str) -> Job | None:
        return self._active.get(job_id)

    def active(self) -> list[Job]:
        return list(self._active.values())

    def start(self, job: Job, work: Coroutine[Any, Any, None]) -> None:
        job.task = asyncio.get_running_loop().create_task(work, name=f"response-job-{job.id}")
        job.task.add_done_callback(lambda task: _log_crash(job, task))

    def cancel(self, job: Job, body: dict) -> bool:
        """Cancelled now (polling sees it at once); the task stops at its next await."""
        if not job.move(JobStatus.CANCELLED, body):
            return False
        if job.task is not None:
            job.task.cancel()
        return True

    def __len__(self) -> int:
        return len(self._active)


def _log_crash(job: Job, task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("background response %s crashed: %r", job.id, task.exception())


def _generated(event: dict) -> bool:
    """The model has produced output (the compaction item comes before generation)."""
    if event["type"] == "response.output_item.added":
        return event["item"]["type"] != "compaction"
    return event["type"] in ("response.completed", "response.incomplete", "response.failed")


async def run_job(run: ResponseRun, job: Job) -> None:
    """A background response from queued to its end. Failures are the job's
    (failed, with code invalid_prompt, server_overloaded or server_error), never the
    create call's; any exception at all fails the job rather than leaving it queued."""
    try:
        await _run(run, job)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - the job fails, the server goes on
        log.exception("background response %s failed", job.id)
        await fail_job(run, job, "server_error", f"internal error: {type(exc).__name__}")


async def _run(run: ResponseRun, job: Job) -> None:
    from mlxcel.chat.errors import ChatInputError
    from mlxcel.chat.template import TemplateError
    from mlxcel.structured.errors import StructuredOutputError

    if run.turn is None:  # compaction runs in the job
        try:
            await run.ready()
        except (TurnError, ChatInputError, TemplateError, StructuredOutputError) as exc:
            message = exc.message if isinstance(exc, (TurnError, ChatInputError)) else str(exc)
            await fail_job(run, job, "invalid_prompt", message)
            return
    try:
        run.turn.submit()
    except TurnError as exc:
        await fail_job(run, job, "server_overloaded", exc.message)
        return
    async for event in run.events():
        if job.status is JobStatus.QUEUED and _generated(event):
            job.move(JobStatus.IN_PROGRESS)
    job.move(JobStatus(run.final["status"]), run.final)


async def fail_job(run: ResponseRun, job: Job, code: str, message: str) -> None:
    """The job ends failed, its object recorded for polling (on a store thread); should
    recording itself fail, a bare failed object is kept instead. A job already ended
    (cancelled) stays as it is."""
    if job.finished:
        return
    try:
        body = await in_store_thread(run.failed, code, message)
    except Exception:  # noqa: BLE001
        log.exception("background response %s: recording its failure failed", job.id)
        body = {**job.body, "status": "failed", "output": [], "error": {"code": code, "message": message}}
        run.keep_bare(body)
    job.move(JobStatus.FAILED, body)
