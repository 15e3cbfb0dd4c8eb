"""A response's final object is recorded once: the end of its generation (recorded on a
worker thread) and a cancel of its background job may come together, and whichever is
recorded first is what the store keeps and the job ends as; the later one changes
nothing."""

from __future__ import annotations

import asyncio

from mlxcel.api.responses.background import JobStatus
from mlxcel.api.responses.response_run import ResponseRun
from mlxcel.api.responses.state import ResponsesState
from mlxcel.api.responses.wire import ResponsesRequest, response_object
from mlxcel.config import ResponsesLimits
from mlxcel.state.memory_backend import MemoryBackend
from mlxcel.turn.context import RequestContext


class Host:
    model_id = "test-model"


def _job(state: ResponsesState, response_id: str):
    data = {"input": "Hi", "background": True}
    body = ResponsesRequest.model_validate(data)
    run = ResponseRun(state, Host(), data, body, RequestContext(request_id=response_id))
    job = state.jobs.admit(response_id, 10, run.snapshot("queued"))
    state.running[response_id] = run
    job.move(JobStatus.IN_PROGRESS)
    return run, job


def _completed(run: ResponseRun) -> dict:
    return response_object(run.id, run.created_at, "test-model", run.body, "completed", [], completed_at=1)


def test_a_cancel_after_the_end_was_recorded_keeps_the_end():
    state = ResponsesState(ResponsesLimits(), prompt_cache=False, backend=MemoryBackend())
    run, job = _job(state, "resp_1")
    assert run.record(_completed(run))["status"] == "completed"  # the generation's end, on its thread
    assert asyncio.run(state.cancel_local("resp_1")) is job
    assert job.status is JobStatus.IN_PROGRESS  # it moves to completed by itself
    assert state.records.find("resp_1").body["status"] == "completed"


def test_the_end_recorded_after_a_cancel_keeps_the_cancel():
    state = ResponsesState(ResponsesLimits(), prompt_cache=False, backend=MemoryBackend())
    run, job = _job(state, "resp_2")
    asyncio.run(state.cancel_local("resp_2"))
    assert job.status is JobStatus.CANCELLED
    assert run.record(_completed(run))["status"] == "cancelled"
    assert state.records.find("resp_2").body["status"] == "cancelled"
