"""Background jobs as every server sharing the state store sees them: a job's
record (status, the body polling shows, owner, the server running it) is written on
every status change and removed once its final object is stored, so a GET on any
replica finds a running job. A job whose server is gone (its lease expired, or its
process is dead on this machine) is failed with a reason, never left in_progress.
A cancel asked of a replica that does not run the job is left here as a request
that the running server picks up within a fraction of a second."""

from __future__ import annotations

import concurrent.futures
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mlxcel.state.instances import InstanceLease
from mlxcel.state.store import UNBOUNDED, StateBackend, StateUnavailable, json_size

if TYPE_CHECKING:
    from mlxcel.api.responses.background import Job

log = logging.getLogger("mlxcel.responses")
CANCEL_REQUEST_TTL_SECS = 120
SERVER_GONE = ("the server that ran this background response stopped before it finished (it was restarted or "
               "killed); create the response again")


@dataclass(frozen=True)
class _Change:
    """A job's state when it changed, as its record is written."""

    id: str
    finished: bool
    status: str
    body: dict
    owner: str | None

    @classmethod
    def of(cls, job: Job) -> _Change:
        return cls(job.id, job.finished, job.status.value, job.body, job.owner)


@dataclass
class JobRecord:
    id: str
    status: str
    body: dict
    owner: str | None
    instance: str

    def failed_body(self) -> dict:
        """The object polling shows once the job's server is known gone."""
        return {**self.body, "status": "failed", "output": [], "completed_at": int(time.time()),
                "error": {"code": "server_error", "message": SERVER_GONE}}


class JobBoard:
    def __init__(self, backend: StateBackend) -> None:
        self.lease = InstanceLease(backend)
        self._jobs = backend.store("jobs", UNBOUNDED, UNBOUNDED, 0)
        self._cancels = backend.store("cancels", UNBOUNDED, UNBOUNDED, CANCEL_REQUEST_TTL_SECS)
        self._unwritten: dict[str, Job] = {}  # jobs whose last change the store did not take (the writer's)
        # the records' writes, one at a time in the order of the changes, off the event loop
        # (a store that stops answering holds each for its timeout)
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mlxcel-job-board")

    def publish(self, job: Job) -> concurrent.futures.Future:
        """Queue the job's record as it is now; a finished job's record is removed (its
        final object is already in the response store). A failure is logged: the job goes
        on, and a store that was down gets the record at its next `flush`. The future is
        done once the store has it (or the failure was logged)."""
        change = _Change.of(job)
        return self._writer.submit(self._publish, job, change)

    def _publish(self, job: Job, change: _Change) -> None:
        try:
            self._write(change)
            self._unwritten.pop(job.id, None)
        except StateUnavailable as exc:
            self._unwritten[job.id] = job
            log.warning("background response %s: its record could not be written: %s", job.id, exc)
        except Exception:  # noqa: BLE001
            log.exception("background response %s: its record in the state store could not be written", job.id)

    @property
    def unwritten(self) -> bool:
        return bool(self._unwritten)

    def settled(self) -> None:
        """Wait until the changes published so far are written (or failed)."""
        self._writer.submit(lambda: None).result()

    def flush(self) -> None:
        """Write the records `publish` could not (the store was down), as their jobs are
        now: a job that ended meanwhile must not read in_progress on every other server
        for as long as this one runs. Raises StateUnavailable while the store is down.
        Runs on the writer, after the changes queued before it."""
        self._writer.submit(self._flush).result()

    def _flush(self) -> None:
        for job in list(self._unwritten.values()):
            self._write(_Change.of(job))
            self._unwritten.pop(job.id, None)

    def _write(self, change: _Change) -> None:
        if change.finished:
            self._jobs.pop(change.id)
            self._cancels.pop(change.id)
        else:
            value = {"status": change.status, "body": change.body, "owner": change.owner, "instance": self.lease.id}
            self._jobs.put(change.id, value, json_size(change.body))

    def find(self, job_id: str) -> JobRecord | None:
        value = self._jobs.peek(job_id)
        return None if value is None else JobRecord(job_id, value["status"], value["body"], value.get("owner"),
                                                    value["instance"])

    def is_local(self, record: JobRecord) -> bool:
        return record.instance == self.lease.id

    def request_cancel(self, job_id: str) -> None:
        self._cancels.put(job_id, True, 1)

    def cancel_requested(self, job_id: str) -> bool:
        return self._cancels.peek(job_id) is not None

    def cancels_requested(self, job_ids: list[str]) -> list[str]:
        return [job_id for job_id in job_ids if self.cancel_requested(job_id)]

    def orphans(self) -> list[JobRecord]:
        """Records of jobs whose server is gone."""
        found = []
        for job_id in self._jobs.keys():
            record = self.find(job_id)
            if record is not None and not self.lease.alive(record.instance):
                found.append(record)
        return found

    def mine(self) -> list[JobRecord]:
        return [r for r in map(self.find, self._jobs.keys()) if r is not None and self.is_local(r)]

    def remove(self, job_id: str) -> None:
        self._jobs.pop(job_id)
        self._cancels.pop(job_id)
