"""State that survives, on SQLite and on a real Redis: two servers sharing one store
see each other's responses and background jobs (a cancel asked of the other server
reaches the one running the job); a server killed while a job runs is restarted on
the same store and finds every stored response, chain and conversation, the job
failed with a reason."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import pytest

from tests.server_process import ServerProcess, free_port

ASK = {"input": "Hi", "max_output_tokens": 4, "temperature": 0}
LONG_JOB = {"input": "Tell a long story.", "max_output_tokens": 900, "ignore_eos": True, "background": True}
_databases = itertools.count(1)


@pytest.fixture(params=["sqlite", "redis"])
def state_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/state.sqlite3"
    return f"{request.getfixturevalue('redis_server').url}/{next(_databases)}"


def _server(state_url: str) -> ServerProcess:
    return ServerProcess("-c", "2048", "-np", "2", "-t", "1", "--state-url", state_url).wait_ready()


def _ok(response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def _wait_for(client, response_id: str, statuses: set[str], timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = _ok(client.get(f"/v1/responses/{response_id}"))
        if body["status"] in statuses:
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.05)


def _history_tokens(client, **request) -> int:
    return _ok(client.post("/v1/responses/input_tokens", json={"input": "Go on.", **request}))["input_tokens"]


def test_servers_share_the_store_and_a_restart_keeps_it(state_url):
    first = _server(state_url)
    try:
        with first.client() as a:
            r1 = _ok(a.post("/v1/responses", json=ASK))
            r2 = _ok(a.post("/v1/responses", json={**ASK, "previous_response_id": r1["id"]}))
            for _ in range(2):
                _ok(a.post("/v1/responses", json={**ASK, "conversation": "conv-1"}))
            second = _server(state_url)
            try:
                with second.client() as b:
                    assert _ok(b.get(f"/v1/responses/{r1['id']}")) == _ok(a.get(f"/v1/responses/{r1['id']}"))
                    r3 = _ok(b.post("/v1/responses", json={**ASK, "previous_response_id": r2["id"]}))
                    assert _ok(a.get(f"/v1/responses/{r3['id']}"))["id"] == r3["id"]
                    job = _ok(a.post("/v1/responses", json=LONG_JOB))
                    assert _ok(b.get(f"/v1/responses/{job['id']}"))["status"] in ("queued", "in_progress")
                    error = b.post("/v1/responses", json={**ASK, "previous_response_id": job["id"]}).json()["error"]
                    assert error["code"] == "previous_response_not_finished"
                    cancelled = _ok(b.post(f"/v1/responses/{job['id']}/cancel"))  # A runs it
                    assert cancelled["status"] == "cancelled" and cancelled["background"] is True
                    assert _ok(a.get(f"/v1/responses/{job['id']}"))["status"] == "cancelled"
            finally:
                second.stop()
            running = _ok(a.post("/v1/responses", json=LONG_JOB))
            _wait_for(a, running["id"], {"in_progress"})
        first.process.kill()  # SIGKILL while the job runs
        first.process.wait()
    finally:
        first.stop()
    restarted = _server(state_url)
    try:
        with restarted.client() as c:
            failed = _wait_for(c, running["id"], {"failed"}, timeout=1)
            assert failed["error"]["code"] == "server_error" and "restarted or killed" in failed["error"]["message"]
            for stored in (r1, r2, r3):
                assert _ok(c.get(f"/v1/responses/{stored['id']}"))["output"] == stored["output"]
            chained = _ok(c.post("/v1/responses", json={**ASK, "previous_response_id": r3["id"]}))
            assert chained["status"] in ("completed", "incomplete")
            assert _history_tokens(c, previous_response_id=r3["id"]) > _history_tokens(c) + 10
            assert _history_tokens(c, conversation="conv-1") > _history_tokens(c) + 10
            _ok(c.post("/v1/responses", json={**ASK, "conversation": "conv-1"}))
    finally:
        restarted.stop()


def test_an_unreachable_redis_is_refused_at_start_in_one_line():
    port = free_port()
    result = subprocess.run([sys.executable, "-m", "mlxcel", "serve", "--port", "0", "--state-url",
                             f"redis://:hunter2@127.0.0.1:{port}/0"], capture_output=True, text=True, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 1 and len(lines) == 1, result.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "hunter2" not in result.stderr and "Traceback" not in result.stderr
