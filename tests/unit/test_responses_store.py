"""The Responses API's records and the background job state machine (the bounded
stores themselves: test_state_store.py, on every backend)."""

from __future__ import annotations

import pytest

from mlxcel.api.responses.background import BackgroundJobs, Job, JobStatus
from mlxcel.api.responses.records import ResponseRecord, ResponseRecords
from mlxcel.config import ResponsesLimits
from mlxcel.http.errors import as_api_error
from mlxcel.state.store import json_size
from mlxcel.turn.context import RequestContext
from mlxcel.turn.errors import TurnError


def test_records_collapse_history_at_the_last_compaction_item():
    records = ResponseRecords(ResponsesLimits(), prompt_cache=True)
    history = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "old"},
        {"type": "compaction", "encrypted_content": "x"},
        {"role": "user", "content": "new"},
    ]
    body = {"id": "resp_1", "status": "completed", "output": []}
    records.save(ResponseRecord(body, history))
    assert records.previous_history("resp_1") == [history[0], history[2], history[3]]
    assert records.responses.bytes == json_size(body, records.previous_history("resp_1"))


def test_previous_history_errors():
    records = ResponseRecords(ResponsesLimits(), prompt_cache=True)
    records.save(ResponseRecord({"id": "eph", "status": "completed", "output": []}, []), ephemeral=True)
    with pytest.raises(TurnError, match="store: false"):
        records.previous_history("eph")
    with pytest.raises(TurnError, match="not found"):
        records.previous_history("nope")
    off = ResponseRecords(ResponsesLimits(store_max_entries=0), prompt_cache=True)
    with pytest.raises(TurnError, match="disabled"):
        off.previous_history("x")


def test_job_state_machine_moves_only_forward():
    job = Job("r", 10, {"id": "r", "status": "queued"})
    finals = []
    job.on_final.append(lambda j: finals.append(j.status))
    assert job.move(JobStatus.IN_PROGRESS) and job.body["status"] == "in_progress"
    assert not job.move(JobStatus.QUEUED)
    assert job.move(JobStatus.COMPLETED, {"id": "r", "status": "completed", "output": [1]})
    assert not job.move(JobStatus.CANCELLED)
    assert job.finished and finals == [JobStatus.COMPLETED] and job.body["output"] == [1]
    queued = Job("q", 1, {"status": "queued"})
    assert queued.move(JobStatus.CANCELLED) and not queued.move(JobStatus.IN_PROGRESS)


def test_admission_caps_jobs_and_bytes_with_429():
    jobs = BackgroundJobs(max_jobs=2, max_bytes=100)
    first = jobs.admit("a", 60, {"status": "queued"})
    with pytest.raises(TurnError) as exc:
        jobs.admit("b", 50, {})
    assert as_api_error(exc.value).status == 429 and exc.value.code == "rate_limit_exceeded"
    jobs.admit("b", 40, {})
    with pytest.raises(TurnError, match="already active"):
        jobs.admit("c", 1, {})
    first.move(JobStatus.FAILED)
    assert jobs.get("a") is None and len(jobs) == 1
    jobs.admit("c", 1, {})


def _run(background: bool, store: bool = True, max_bytes: int = 3000):
    from types import SimpleNamespace

    from mlxcel.api.responses.response_run import ResponseRun
    from mlxcel.api.responses.state import ResponsesState
    from mlxcel.api.responses.wire import ResponsesRequest

    state = ResponsesState(ResponsesLimits(store_max_bytes=max_bytes), prompt_cache=True)
    host = SimpleNamespace(model_id="m", config=SimpleNamespace(chat_template_kwargs={}))
    run = ResponseRun(state, host, {}, ResponsesRequest(input="hi", background=background, store=store),
                      RequestContext("resp_test"))
    run.history = [{"role": "user", "content": "hi"}]
    return state, run


def _finished(run, text: str) -> dict:
    from mlxcel.api.responses.wire import message_item

    return {**run.snapshot("completed"), "output": [message_item("msg_1", text)]}


def test_a_background_result_over_the_byte_budget_leaves_a_failed_object():
    state, run = _run(background=True)
    recorded = run.record(_finished(run, "x" * 5000))
    assert recorded["status"] == "failed" and recorded["output"] == []
    assert recorded["error"]["code"] == "server_error" and recorded["background"] is True
    assert state.records.find(run.id).body == recorded
    state, run = _run(background=True)
    small = _finished(run, "ok")
    assert run.record(small) is small and state.records.find(run.id).body is small


def test_store_false_background_results_are_ephemeral_and_foreground_ones_are_not_kept():
    state, run = _run(background=True, store=False)
    run.record(_finished(run, "ok"))
    assert run.id in state.records.ephemeral and run.id not in state.records.responses
    state, run = _run(background=False, store=False)
    run.record(_finished(run, "ok"))
    assert state.records.find(run.id) is None
