"""The Responses API's bounded stores and the background job state machine."""

from __future__ import annotations

import pytest

from mlxcel.api.responses.background import BackgroundJobs, Job, JobStatus
from mlxcel.api.responses.records import ResponseRecord, ResponseRecords
from mlxcel.api.responses.store import BoundedStore, json_size
from mlxcel.config import ResponsesLimits
from mlxcel.http.errors import as_api_error
from mlxcel.turn.context import RequestContext
from mlxcel.turn.errors import TurnError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_entry_cap_evicts_the_least_recently_used():
    store = BoundedStore(3, 10_000, 0)
    for key in "abc":
        store.put(key, key.upper(), 10)
    assert store.get("a") == "A"  # a is now the most recently used
    store.put("d", "D", 10)
    assert list(store.keys()) == ["c", "a", "d"]
    assert "b" not in store


def test_byte_budget_evicts_in_lru_order_and_rejects_an_entry_too_big():
    store = BoundedStore(100, 30, 0)
    store.put("a", 1, 10)
    store.put("b", 2, 10)
    store.put("c", 3, 10)
    store.peek("a")  # peek does not refresh
    store.put("d", 4, 15)
    assert list(store.keys()) == ["c", "d"] and store.bytes == 25
    assert store.put("huge", 5, 31) is False
    assert list(store.keys()) == ["c", "d"]


def test_replacing_an_entry_counts_its_bytes_once():
    store = BoundedStore(10, 100, 0)
    store.put("a", 1, 40)
    store.put("a", 2, 50)
    assert store.bytes == 50 and store.get("a") == 2


def test_ttl_expires_entries_and_zero_disables_it():
    clock = Clock()
    store = BoundedStore(10, 1000, 60, clock=clock)
    forever = BoundedStore(10, 1000, 0, clock=clock)
    store.put("a", 1, 1)
    store.put("short", 2, 1, ttl_secs=5)
    forever.put("a", 1, 1)
    clock.now += 10
    assert "short" not in store and store.get("a") == 1
    clock.now += 60
    assert store.get("a") is None and len(store) == 0 and store.bytes == 0
    clock.now += 10**6
    assert forever.get("a") == 1


def test_zero_entries_disables_and_zero_bytes_evicts_at_once():
    off = BoundedStore(0, 1000, 0)
    assert not off.enabled and off.put("a", 1, 1) is False
    evicting = BoundedStore(10, 0, 0)
    assert evicting.enabled and evicting.put("a", 1, 1) is False and evicting.get("a") is None


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
