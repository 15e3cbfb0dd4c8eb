"""Stored responses, conversations and jobs belong to the API key that made them;
a conversation over its byte budget is refused and keeps its transcript."""

from __future__ import annotations

import asyncio
import hashlib
from types import SimpleNamespace

import pytest

from mlxcel.api.responses.records import ResponseRecord, ResponseRecords
from mlxcel.api.responses.response_run import ResponseRun
from mlxcel.api.responses.state import ResponsesState
from mlxcel.api.responses.wire import ResponsesRequest, message_item
from mlxcel.config import ResponsesLimits
from mlxcel.http.auth import APIKeyMiddleware, request_key_id
from mlxcel.http.errors import as_api_error
from mlxcel.state.store import json_size
from mlxcel.turn.context import RequestContext
from mlxcel.turn.errors import InvalidRequest, TurnError

HISTORY = [{"role": "user", "content": "hi"}]


def body(response_id: str) -> dict:
    return {"id": response_id, "status": "completed", "output": []}


def test_a_response_is_found_only_with_its_owners_key():
    records = ResponseRecords(ResponsesLimits(), prompt_cache=True)
    records.save(ResponseRecord(body("r1"), HISTORY, owner="a"))
    records.save(ResponseRecord(body("e1"), HISTORY, owner="a"), ephemeral=True)
    assert records.find("r1", "a").body["id"] == "r1" and records.find("r1", "b") is None
    assert records.find("r1") is None  # no key is a scope of its own
    assert not records.drop("r1", "b") and records.find("r1", "a") is not None
    assert records.previous_history("r1", "a") == HISTORY
    with pytest.raises(TurnError, match="previous response 'r1' not found"):
        records.previous_history("r1", "b")
    with pytest.raises(TurnError, match="not found"):  # not "store: false": another key learns nothing
        records.previous_history("e1", "b")
    with pytest.raises(TurnError, match="store: false"):
        records.previous_history("e1", "a")
    assert records.drop("r1", "a") and records.find("r1", "a") is None


def test_a_failed_response_kept_without_its_history_cannot_be_continued():
    """A background result over the store's budget is kept bare (failed, no history):
    continuing it would silently drop every earlier turn."""
    records = ResponseRecords(ResponsesLimits(), prompt_cache=True)
    failed = {"id": "big", "status": "failed", "output": [],
              "error": {"code": "server_error", "message": "the response is larger than the store's budget"}}
    records.save(ResponseRecord(failed, [], owner="a"))
    with pytest.raises(InvalidRequest, match="kept no history.*larger than the store"):
        records.previous_history("big", "a")
    records.save(ResponseRecord({**failed, "id": "f2"}, HISTORY, owner="a"))  # a failure that kept its input
    assert records.previous_history("f2", "a") == HISTORY


def test_a_conversation_is_another_keys_404_and_is_not_taken_over():
    records = ResponseRecords(ResponsesLimits(), prompt_cache=True)
    records.save_conversation("c", HISTORY, owner="a")
    assert records.conversation_history("c", "a") == HISTORY
    assert records.conversation_history("new", "b") == []
    for attempt in (lambda: records.conversation_history("c", "b"),
                    lambda: records.save_conversation("c", [{"role": "user", "content": "mine"}], owner="b")):
        with pytest.raises(TurnError) as exc:
            attempt()
        assert as_api_error(exc.value).status == 404 and exc.value.code == "conversation_not_found"
    assert records.conversation_history("c", "a") == HISTORY


def test_jobs_and_running_responses_are_looked_up_by_owner():
    state = ResponsesState(ResponsesLimits(), prompt_cache=True)
    state.jobs.admit("r", 1, {"id": "r", "status": "queued"}, owner="a")
    state.running["r"] = SimpleNamespace(owner="a")
    assert state.job("r", "a") is not None and state.job("r", "b") is None
    assert state.run("r", "a") is not None and state.run("r", "b") is None
    with pytest.raises(TurnError, match="has not finished"):
        state.previous_history("r", "a")
    with pytest.raises(TurnError, match="not found"):
        state.previous_history("r", "b")


def test_a_conversation_over_its_budget_is_refused_and_keeps_its_transcript():
    small = [{"role": "user", "content": "x" * 50}]
    records = ResponseRecords(ResponsesLimits(conversation_max_bytes=json_size(small) + 10), prompt_cache=True)
    records.save_conversation("c", small)
    with pytest.raises(TurnError) as exc:
        records.save_conversation("c", small + [{"role": "assistant", "content": "y" * 50}])
    assert as_api_error(exc.value).status == 400 and exc.value.code == "conversation_too_large"
    assert "--conversation-store-max-bytes" in exc.value.message
    assert records.conversation_history("c") == small
    with pytest.raises(TurnError, match="conversation_too_large|budget"):
        records.check_conversation_size("c", small * 2)


def test_a_zero_conversation_budget_keeps_nothing_and_refuses_nothing():
    records = ResponseRecords(ResponsesLimits(conversation_max_bytes=0), prompt_cache=True)
    records.save_conversation("c", HISTORY)
    assert records.conversation_history("c") == []


def test_a_finished_turn_over_the_conversation_budget_fails_the_response():
    state = ResponsesState(ResponsesLimits(conversation_max_bytes=300), prompt_cache=True)
    host = SimpleNamespace(model_id="m", config=SimpleNamespace(chat_template_kwargs={}))
    run = ResponseRun(state, host, {}, ResponsesRequest(input="hi", conversation="c"), RequestContext("resp_test", owner="a"))
    run.history = list(HISTORY)
    state.records.save_conversation("c", [], owner="a")
    final = run.record({**run.snapshot("completed"), "output": [message_item("msg_1", "z" * 400)]})
    assert final["status"] == "failed" and final["output"] == []
    assert final["error"]["code"] == "conversation_too_large" and final["conversation"] == {"id": "c"}
    assert final["error"]["message"].startswith("the output was generated but is not kept")
    run.final = final
    error = run.failure_error()
    assert as_api_error(error).status == 400 and error.code == "conversation_too_large"
    assert state.records.conversation_history("c", "a") == []  # unchanged, not dropped
    assert state.records.find(run.id, "a").body["status"] == "failed"


def _scope_after(headers: list[tuple[bytes, bytes]]) -> dict:
    """The scope the app behind a middleware for keys k1 and k2 sees (or the rejection)."""
    seen = {}

    async def app(scope, receive, send):
        seen.update(scope)

    async def send(message):
        seen.setdefault("rejected", message.get("status"))

    scope = {"type": "http", "method": "GET", "path": "/v1/responses/x", "headers": headers, "state": {"lifespan": 1}}
    asyncio.run(APIKeyMiddleware(app, ["k1", "k2"])(scope, None, send))
    return seen


def test_the_middleware_records_a_digest_of_the_key_that_matched():
    first = _scope_after([(b"authorization", b"Bearer k1")])
    second = _scope_after([(b"x-api-key", b"k2")])
    again = _scope_after([(b"authorization", b"k1")])
    assert request_key_id(first) == request_key_id(again) != request_key_id(second)
    assert request_key_id(first) == hashlib.sha256(b"k1").hexdigest()[:32]
    assert first["state"]["lifespan"] == 1 and "k1" not in str(first["state"])
    assert _scope_after([(b"authorization", b"Bearer nope")]) == {"rejected": 401}
    assert request_key_id({"type": "http"}) is None


def test_two_turns_of_one_conversation_at_once_both_stay_in_it():
    state = ResponsesState(ResponsesLimits(), prompt_cache=True)
    host = SimpleNamespace(model_id="m", config=SimpleNamespace(chat_template_kwargs={}))
    state.records.save_conversation("c", HISTORY, owner="a")
    runs = []
    for n in (1, 2):  # both read the transcript before either finishes
        run = ResponseRun(state, host, {}, ResponsesRequest(input=f"q{n}", conversation="c"),
                          RequestContext(f"resp_{n}", owner="a"))
        run.conversation_base = state.records.conversation_history("c", "a")
        run.history = run.conversation_base + [{"type": "message", "role": "user", "content": f"q{n}"}]
        runs.append(run)
    for n, run in enumerate(runs, 1):
        run.record({**run.snapshot("completed"), "output": [message_item(f"msg_{n}", f"a{n}")]})
    texts = [item["content"] if isinstance(item["content"], str) else item["content"][0]["text"]
             for item in state.records.conversation_history("c", "a")]
    assert texts == ["hi", "q1", "a1", "q2", "a2"]
