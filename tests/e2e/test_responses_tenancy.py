"""On one server with two API keys, a small conversation budget and a small input
item cap: what one key stores is not found with the other; a conversation over its
budget is refused and keeps its transcript; every Responses route honours the
--max-messages cap on `input`."""

from __future__ import annotations

import time
import uuid

import pytest

from mlxcel.state.store import json_size
from tests.server_process import ServerProcess

BUDGET = 4000
ASK = {"max_output_tokens": 4, "temperature": 0}


@pytest.fixture(scope="module")
def tenants():
    proc = ServerProcess("-c", "4096", "-np", "2", "--api-key", "k1,k2", "--conversation-store-max-bytes", str(BUDGET),
                         "--max-messages", "50")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def one(tenants):
    with tenants.client(headers={"Authorization": "Bearer k1"}) as client:
        yield client


@pytest.fixture(scope="module")
def two(tenants):
    with tenants.client(headers={"x-api-key": "k2"}) as client:
        yield client


def _error(response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code"}
    return error


def _wait(client, response_id: str) -> dict:
    deadline = time.monotonic() + 120
    while (body := client.get(f"/v1/responses/{response_id}").json())["status"] in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return body


def test_a_stored_response_is_not_found_with_another_key(one, two):
    created = one.post("/v1/responses", json={"input": "My name is Tom.", **ASK}).json()
    rid = created["id"]
    for response in (two.get(f"/v1/responses/{rid}"), two.delete(f"/v1/responses/{rid}"),
                     two.post(f"/v1/responses/{rid}/cancel")):
        assert _error(response, 404)["code"] == "not_found"
    unknown = _error(two.post("/v1/responses", json={"input": "x", "previous_response_id": "resp_nope", **ASK}), 400)
    for path in ("/v1/responses", "/v1/responses/input_tokens"):
        theirs = _error(two.post(path, json={"input": "x", "previous_response_id": rid, **ASK}), 400)
        assert theirs == {**unknown, "message": unknown["message"].replace("resp_nope", rid)}
    assert one.get(f"/v1/responses/{rid}").json() == created
    assert one.post("/v1/responses", json={"input": "And?", "previous_response_id": rid, **ASK}).status_code == 200
    assert one.delete(f"/v1/responses/{rid}").json()["deleted"] is True


def test_a_background_job_is_not_found_with_another_key(one, two):
    job = one.post("/v1/responses", json={"input": "Tell a story.", "background": True, "max_output_tokens": 200,
                                          "ignore_eos": True}).json()
    for response in (two.get(f"/v1/responses/{job['id']}"), two.post(f"/v1/responses/{job['id']}/cancel"),
                     two.delete(f"/v1/responses/{job['id']}")):
        _error(response, 404)
    assert one.post(f"/v1/responses/{job['id']}/cancel").json()["status"] == "cancelled"
    assert _wait(one, job["id"])["status"] == "cancelled"
    _error(two.get(f"/v1/responses/{job['id']}"), 404)


def test_a_conversation_is_not_found_with_another_key(one, two):
    conversation = f"conv_{uuid.uuid4().hex}"
    assert one.post("/v1/responses", json={"input": "My name is Tom.", "conversation": conversation,
                                           **ASK}).status_code == 200
    before = one.post("/v1/responses/input_tokens", json={"input": "x", "conversation": conversation}).json()
    for path in ("/v1/responses", "/v1/responses/input_tokens"):
        error = _error(two.post(path, json={"input": "mine now", "conversation": conversation, **ASK}), 404)
        assert error["code"] == "conversation_not_found"
    assert one.post("/v1/responses/input_tokens", json={"input": "x", "conversation": conversation}).json() == before


def _user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": text}


def test_a_conversation_over_its_budget_is_refused_and_keeps_its_transcript(one):
    conversation = f"conv_{uuid.uuid4().hex}"
    first = one.post("/v1/responses", json={"input": "My name is Tom.", "conversation": conversation, **ASK}).json()
    transcript = [_user("My name is Tom."), *first["output"]]

    def count(**body) -> int:
        return one.post("/v1/responses/input_tokens", json={"input": "Who am I?", **body}).json()["input_tokens"]

    replayed = count(input=[*transcript, {"role": "user", "content": "Who am I?"}])
    assert count(conversation=conversation) == replayed
    # over the budget before generation
    error = _error(one.post("/v1/responses", json={"input": "word " * 1000, "conversation": conversation, **ASK}), 400)
    assert error["code"] == "conversation_too_large" and str(BUDGET) in error["message"]
    assert "output" not in error["message"]
    # within it before generation, over it with the output: refused after generation
    filler = "word " * ((BUDGET - 20 - json_size([*transcript, _user("")])) // 5)
    assert BUDGET - 25 < json_size([*transcript, _user(filler)]) <= BUDGET
    error = _error(one.post("/v1/responses", json={"input": filler, "conversation": conversation, **ASK}), 400)
    assert error["code"] == "conversation_too_large" and "output was generated" in error["message"]
    # the transcript is the one before both: not dropped, not restarted empty
    assert count(conversation=conversation) == replayed
    assert one.post("/v1/responses", json={"input": "Who am I?", "conversation": conversation,
                                           **ASK}).status_code == 200


def test_the_input_item_cap_is_a_400_naming_it(one):
    items = [{"role": "user", "content": "x"}] * 50
    assert one.post("/v1/responses/input_tokens", json={"input": items}).status_code == 200
    for path in ("/v1/responses", "/v1/responses/input_tokens", "/v1/responses/compact"):
        error = _error(one.post(path, json={"input": [*items, items[0]]}), 400)
        assert "50" in error["message"] and "--max-messages" in error["message"]
