"""The Responses stores' limits on their own servers: storage off, and tiny caps."""

from __future__ import annotations

import time

import pytest

from tests.server_process import ServerProcess

ASK = {"input": "Hi", "max_output_tokens": 2, "temperature": 0}


@pytest.fixture(scope="module")
def store_off():
    proc = ServerProcess("-c", "512", "-np", "1", "--responses-store-max-entries", "0",
                         env={"LLAMA_ARG_CONVERSATION_STORE_MAX_ENTRIES": "0"})
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def tiny():
    proc = ServerProcess("-c", "2048", "-np", "2", "--responses-store-max-entries", "3",
                         "--responses-background-max-jobs", "1")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _error(response, status=400) -> dict:
    assert response.status_code == status, response.text
    return response.json()["error"]


def test_store_off_answers_but_keeps_nothing(store_off):
    with store_off.client() as client:
        created = client.post("/v1/responses", json=ASK)
        assert created.status_code == 200 and created.json()["status"] in ("completed", "incomplete")
        response_id = created.json()["id"]
        for response in (client.get(f"/v1/responses/{response_id}"),
                         client.delete(f"/v1/responses/{response_id}"),
                         client.post(f"/v1/responses/{response_id}/cancel"),
                         client.post("/v1/responses", json={**ASK, "previous_response_id": response_id})):
            error = _error(response)
            assert error["type"] == "invalid_request_error" and "disabled" in error["message"]
        assert "background" in _error(client.post("/v1/responses", json={**ASK, "background": True}))["message"]
        assert "conversations" in _error(client.post("/v1/responses", json={**ASK, "conversation": "c"}))["message"]


def test_the_least_recently_used_response_is_evicted_first(tiny):
    with tiny.client() as client:
        ids = [client.post("/v1/responses", json=ASK).json()["id"] for _ in range(3)]
        assert client.get(f"/v1/responses/{ids[0]}").status_code == 200  # now the most recently used
        newest = client.post("/v1/responses", json=ASK).json()["id"]
        kept = {i: client.get(f"/v1/responses/{i}").status_code for i in [*ids, newest]}
    assert kept == {ids[0]: 200, ids[1]: 404, ids[2]: 200, newest: 200}


def test_background_job_cap_is_a_429(tiny):
    with tiny.client() as client:
        long = {"input": "Tell a story.", "max_output_tokens": 400, "ignore_eos": True, "background": True}
        first = client.post("/v1/responses", json=long).json()
        error = _error(client.post("/v1/responses", json=long), 429)
        assert error["code"] == "rate_limit_exceeded"
        cancelled = client.post(f"/v1/responses/{first['id']}/cancel").json()
        assert cancelled["status"] == "cancelled" and cancelled["background"] is True
        second = client.post("/v1/responses", json={**long, "max_output_tokens": 2})
        assert second.status_code == 200
        deadline = time.monotonic() + 60
        while client.get(f"/v1/responses/{second.json()['id']}").json()["status"] in ("queued", "in_progress"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
