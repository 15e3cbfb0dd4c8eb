"""The Responses API's state on one server: records, background jobs, and the
responses being generated now (which the cancel route can reach). Every lookup by id
takes the caller's `owner` (its API key's digest): another key's finds nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlxcel.api.responses.background import BackgroundJobs, Job
from mlxcel.api.responses.records import ResponseRecords
from mlxcel.config import ResponsesLimits
from mlxcel.turn.errors import InvalidRequest

if TYPE_CHECKING:
    from mlxcel.api.responses.response_run import ResponseRun


class ResponsesState:
    def __init__(self, limits: ResponsesLimits, prompt_cache: bool) -> None:
        self.limits = limits
        self.records = ResponseRecords(limits, prompt_cache)
        self.jobs = BackgroundJobs(limits.background_max_jobs, limits.store_max_bytes)
        self.running: dict[str, ResponseRun] = {}

    @property
    def background_enabled(self) -> bool:
        limits = self.limits
        return limits.background_max_jobs > 0 and limits.store_max_entries > 0 and limits.store_max_bytes > 0

    def job(self, response_id: str, owner: str | None) -> Job | None:
        job = self.jobs.get(response_id)
        return job if job is not None and job.owner == owner else None

    def run(self, response_id: str, owner: str | None) -> ResponseRun | None:
        run = self.running.get(response_id)
        return run if run is not None and run.owner == owner else None

    def previous_history(self, response_id: str, owner: str | None) -> list[dict]:
        self.records.require_storing()
        job = self.job(response_id, owner)
        if job is not None:
            raise InvalidRequest(f"previous response '{response_id}' has not finished (status: {job.status.value})",
                                  code="previous_response_not_finished")
        return self.records.previous_history(response_id, owner)
