"""The Responses API's state on one server: records, background jobs, and the
responses being generated now (which the cancel route can reach)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mlxcel.config import ResponsesLimits
from mlxcel.responses.background import BackgroundJobs
from mlxcel.responses.records import ResponseRecords
from mlxcel.server.errors import invalid_request

if TYPE_CHECKING:
    from mlxcel.responses.response_run import ResponseRun


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

    def previous_history(self, response_id: str) -> list[dict]:
        self.records.require_storing()
        job = self.jobs.get(response_id)
        if job is not None:
            raise invalid_request(f"previous response '{response_id}' has not finished (status: {job.status.value})",
                                  code="previous_response_not_finished")
        return self.records.previous_history(response_id)
