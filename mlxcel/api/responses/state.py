"""The Responses API's state on one server: records and background jobs (both in the
state store, shared with every server on it), and the responses being generated now
(which the cancel route can reach). Every lookup by id takes the caller's `owner`
(its API key's digest): another key's finds nothing.

`start` (before serving) takes this server's lease and fails the jobs of servers that
are gone; `watch` then runs on the event loop (its store calls on worker threads): it
writes the job records a store that was down missed, honours cancels asked on other
replicas and fails orphaned jobs every few seconds; `stop` fails what this server
still runs and gives the lease back."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from mlxcel.api.responses.background import BackgroundJobs, Job, JobStatus
from mlxcel.api.responses.job_board import JobBoard, JobRecord
from mlxcel.api.responses.records import ResponseRecord, ResponseRecords
from mlxcel.api.responses.store_calls import in_store_thread
from mlxcel.config import ResponsesLimits
from mlxcel.state.instances import RENEW_SECS
from mlxcel.state.memory_backend import MemoryBackend
from mlxcel.state.store import StateBackend, StateUnavailable
from mlxcel.turn.errors import InvalidRequest, TimedOut

if TYPE_CHECKING:
    from mlxcel.api.responses.response_run import ResponseRun

log = logging.getLogger("mlxcel.responses")
CANCEL_POLL_SECS = 0.25
REMOTE_CANCEL_WAIT_SECS = 5.0


class ResponsesState:
    def __init__(self, limits: ResponsesLimits, prompt_cache: bool, backend: StateBackend | None = None) -> None:
        self.limits = limits
        self.backend = backend or MemoryBackend()  # memory: unit tests of pure logic
        self.records = ResponseRecords(limits, prompt_cache, self.backend)
        self.board = JobBoard(self.backend)
        self.jobs = BackgroundJobs(limits.background_max_jobs, limits.store_max_bytes, self.board)
        self.running: dict[str, ResponseRun] = {}

    @property
    def background_enabled(self) -> bool:
        limits = self.limits
        return limits.background_max_jobs > 0 and limits.store_max_entries > 0 and limits.store_max_bytes > 0

    def job(self, response_id: str, owner: str | None) -> Job | None:
        """An active job, this server's or (from its record) another's."""
        job = self.jobs.get(response_id)
        if job is None:
            record = self.board.find(response_id)
            if record is None or self.board.is_local(record):
                return None
            if not self.board.lease.alive(record.instance):
                self.fail_record(record)
                return None
            job = Job(record.id, 0, record.body, JobStatus(record.status), owner=record.owner)
        return job if job.owner == owner else None

    def run(self, response_id: str, owner: str | None) -> ResponseRun | None:
        run = self.running.get(response_id)
        return run if run is not None and run.owner == owner else None

    def unfinished(self, response_id: str, owner: str | None) -> ResponseRun | None:
        """A stored (store: true) response this server is still generating in the
        foreground (whole or streamed): it is recorded when it ends, and meanwhile it is
        `in_progress`, as a background job's is."""
        run = self.run(response_id, owner)
        if run is None or run.background or not run.body.store or run.finished.is_set():
            return None
        return run

    def previous_history(self, response_id: str, owner: str | None) -> list[dict]:
        self.records.require_storing()
        job = self.job(response_id, owner)
        if job is not None:
            raise InvalidRequest(f"previous response '{response_id}' has not finished (status: {job.status.value})",
                                  code="previous_response_not_finished")
        if self.unfinished(response_id, owner) is not None:
            raise InvalidRequest(f"previous response '{response_id}' has not finished (status: in_progress)",
                                  code="previous_response_not_finished")
        return self.records.previous_history(response_id, owner)

    # -- cancelling ---------------------------------------------------------------

    async def cancel_local(self, response_id: str) -> Job | None:
        """Cancel a job this server runs: its cancelled object is stored (on a store
        thread), the task stops; a job whose end was recorded just before moves there by
        itself."""
        run, job = self.running.get(response_id), self.jobs.get(response_id)
        if run is None or job is None:
            return None
        body = await in_store_thread(run.cancelled)
        if body is not None:
            self.jobs.cancel(job, body)
        return job

    async def cancel_elsewhere(self, response_id: str, owner: str | None) -> ResponseRecord | None:
        """Ask the server running a job to cancel it, and wait for its final object."""
        await in_store_thread(self.board.request_cancel, response_id)
        deadline = time.monotonic() + REMOTE_CANCEL_WAIT_SECS
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            if await in_store_thread(self.job, response_id, owner) is None:
                return await in_store_thread(self.records.find, response_id, owner)
        raise TimedOut(f"the server running response '{response_id}' did not confirm the cancel within "
                       f"{REMOTE_CANCEL_WAIT_SECS:g} s; it stays asked: poll GET /v1/responses/{response_id}",
                       "cancel_timeout")

    # -- jobs of servers that are gone --------------------------------------------

    def fail_record(self, record: JobRecord) -> None:
        body = record.failed_body()
        self.records.save(ResponseRecord(body, [], record.owner), ephemeral=body.get("store") is False)
        self.board.remove(record.id)
        log.warning("background response %s was left %s by a server that is gone: failed", record.id, record.status)

    def fail_orphans(self) -> None:
        for record in self.board.orphans():
            self.fail_record(record)

    # -- lifecycle ----------------------------------------------------------------

    def start(self) -> None:
        self.board.lease.start()
        self.fail_orphans()

    async def watch(self) -> None:
        last_sweep = time.monotonic()
        while True:
            await asyncio.sleep(CANCEL_POLL_SECS)
            try:
                if self.board.unwritten:
                    await in_store_thread(self.board.flush)
                active = [job.id for job in self.jobs.active()]
                for job_id in await in_store_thread(self.board.cancels_requested, active) if active else ():
                    await self.cancel_local(job_id)
                if time.monotonic() - last_sweep >= RENEW_SECS:
                    last_sweep = time.monotonic()
                    await in_store_thread(self.fail_orphans)
            except StateUnavailable as exc:  # down a while: the next round retries
                log.warning("watching background jobs failed: %s", exc)
            except Exception:  # noqa: BLE001
                log.exception("watching background jobs in the state store failed")

    def stop(self) -> None:
        try:
            self.board.settled()  # the changes queued before the stop, then the failures over them
            for record in self.board.mine():
                self.fail_record(record)
            self.board.lease.stop()
        except Exception:  # noqa: BLE001 - shutting down: the lease then runs out by itself
            log.exception("leaving the state store cleanly failed")
