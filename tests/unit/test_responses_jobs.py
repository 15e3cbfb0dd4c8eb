"""A background job ends failed, with an error object, whatever its run raises, and
every body a job or the store shows serializes as strict UTF-8 JSON."""

from __future__ import annotations

import asyncio
import json
import math
from types import SimpleNamespace

import pytest

from mlxcel.api.responses.background import Job, JobStatus, run_job
from mlxcel.api.responses.json_safe import is_json_safe, json_safe
from mlxcel.api.responses.response_run import UNENCODABLE, ResponseRun
from mlxcel.api.responses.state import ResponsesState
from mlxcel.api.responses.wire import ResponsesRequest, message_item, response_object
from mlxcel.config import ResponsesLimits
from mlxcel.http.errors import as_api_error
from mlxcel.turn.context import RequestContext


def encodes(body: dict) -> bool:
    """As the HTTP layer sends a body: UTF-8 JSON without NaN."""
    json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
    return True


def background_run(**request) -> tuple[ResponsesState, ResponseRun, Job]:
    state = ResponsesState(ResponsesLimits(), prompt_cache=True)
    host = SimpleNamespace(model_id="m", config=SimpleNamespace(chat_template_kwargs={}))
    body = ResponsesRequest(input="hi", background=True, **request)
    run = ResponseRun(state, host, {}, body, RequestContext("resp_test", owner="key1"))
    run.history = [{"role": "user", "content": "hi"}]
    run.turn = SimpleNamespace(submit=lambda: None)
    job = state.jobs.admit(run.id, 10, run.snapshot("queued"), run.owner)
    state.running[run.id] = run
    job.on_final.append(lambda _job: state.running.pop(run.id, None))
    return state, run, job


def finish(run: ResponseRun, job: Job, events) -> None:
    run.events = events
    asyncio.run(run_job(run, job))


def assert_failed_and_pollable(state: ResponsesState, run: ResponseRun, job: Job) -> dict:
    assert job.status is JobStatus.FAILED and job.finished
    assert job.body["status"] == "failed" and job.body["error"]["code"] and job.body["error"]["message"]
    assert encodes(job.body)
    assert state.job(run.id, "key1") is None and run.id not in state.running  # no longer active
    stored = state.records.find(run.id, "key1")  # what GET answers from now on
    assert stored is not None and stored.body["status"] == "failed" and encodes(stored.body)
    return stored.body


def test_an_exception_while_generating_fails_the_job():
    state, run, job = background_run()

    async def events():
        yield {"type": "response.created"}
        raise RuntimeError("boom")

    finish(run, job, events)
    body = assert_failed_and_pollable(state, run, job)
    assert body["error"] == {"code": "server_error", "message": "internal error: RuntimeError"}


def test_a_final_body_that_cannot_be_encoded_fails_the_job():
    state, run, job = background_run(instructions="\ud800")

    async def events():
        output = [message_item("msg_1", "hello")]
        run.final = run.record(response_object(run.id, run.created_at, "m", run.body, "completed", output))
        yield {"type": "response.completed"}

    finish(run, job, events)
    body = assert_failed_and_pollable(state, run, job)
    assert body["error"]["message"] == UNENCODABLE and body["output"] == []
    assert body["instructions"] == "\ufffd" and body["background"] is True


def test_a_job_whose_failure_cannot_be_recorded_still_ends_failed_and_pollable():
    state, run, job = background_run()

    async def events():
        raise ValueError("broken")
        yield  # an async generator

    def failed(code, message):
        raise TypeError("recording failed too")

    run.failed = failed
    finish(run, job, events)
    body = assert_failed_and_pollable(state, run, job)
    assert body["error"]["code"] == "server_error" and body["id"] == run.id


def test_a_run_that_ends_without_a_final_object_fails_the_job():
    state, run, job = background_run()

    async def events():
        yield {"type": "response.created"}

    finish(run, job, events)
    assert_failed_and_pollable(state, run, job)


def test_a_cancelled_job_is_not_turned_into_a_failure():
    state, run, job = background_run()
    state.jobs.cancel(job, run.cancelled())

    async def events():
        raise RuntimeError("after the cancel")
        yield

    finish(run, job, events)
    assert job.status is JobStatus.CANCELLED and state.records.find(run.id, "key1").body["status"] == "cancelled"


def test_job_bodies_are_made_encodable():
    job = Job("r", 1, {"id": "r", "status": "queued", "instructions": "a\udc80b", "temperature": math.nan})
    assert encodes(job.body) and job.body["instructions"] == "a\ufffdb" and job.body["temperature"] is None
    job.move(JobStatus.FAILED, {"id": "r", "status": "failed", "error": {"message": "\ud800", "code": object()}})
    assert encodes(job.body) and job.body["error"]["message"] == "\ufffd"


@pytest.mark.parametrize("value, cleaned", [
    ({"a": "ok", "b": [1, 2.5, None, True]}, {"a": "ok", "b": [1, 2.5, None, True]}),
    ({"a": "\ud83d\ude00"}, {"a": "\ufffd\ufffd"}),  # an unpaired pair of surrogates, as two
    ({"a": [math.inf, -math.inf]}, {"a": [None, None]}),
    ({"a": ("t",), 1: {1, 2}}, {"a": ["t"], "1": "{1, 2}"}),
])
def test_json_safe(value, cleaned):
    assert json_safe(value) == cleaned and is_json_safe(json_safe(value))


def test_json_safe_returns_an_encodable_value_itself():
    body = {"text": "héllo 😀", "n": 1}
    assert json_safe(body) is body and is_json_safe(body)
    assert not is_json_safe({"x": "\ud800"}) and not is_json_safe({"x": math.nan})


@pytest.mark.parametrize("failure, status", [(None, 500), ("ENGINE", 503)])
def test_a_failed_generation_answers_as_the_other_apis_do(failure, status):
    from mlxcel.engine.request import Failure, FinishEvent, FinishReason, Timings

    _, run, _ = background_run()
    run.failed_generation = FinishEvent(FinishReason.ERROR, 3, 0, 0, Timings(), error="decode failed",
                                        failure=failure and Failure[failure])
    run.final = run.failed("server_error", "generation failed: decode failed")
    assert as_api_error(run.failure_error()).status == status


@pytest.mark.parametrize("failure, code, message", [
    (None, "server_error", "generation failed: decode failed"),
    ("STOPPING", "server_error", "decode failed"),
    ("SHED", "server_error", "decode failed"),
    ("ENGINE", "server_error", "the server cannot generate: decode failed"),
    ("UNSATISFIABLE", "invalid_prompt", "decode failed"),
])
def test_a_failed_generations_response_names_its_kind_as_the_other_apis_do(failure, code, message):
    from mlxcel.api.responses.response_run import _status
    from mlxcel.engine.request import Failure, FinishEvent, FinishReason, Timings

    finish = FinishEvent(FinishReason.ERROR, 3, 0, 0, Timings(), error="decode failed",
                         failure=failure and Failure[failure])
    assert _status(finish) == ("failed", None, {"code": code, "message": message})
