"""A server whose Redis state store fails while it runs: every Responses request
that needs the store answers 503 unavailable_error / state_store_unavailable in the
spec's format (a stream ends with response.failed), never a 500 or the password, the
rest of the server keeps answering, and the store is used again once Redis is back.
A Redis that stops answering (stopped, not gone: each call waits for its socket
timeout) does not stall the event loop or the other APIs: /health and chat answer
while reads wait on it."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import time

import pytest

from tests.server_process import ServerProcess

ASK = {"input": "Hi", "max_output_tokens": 4, "temperature": 0}
PASSWORD = "hunter2-now"
READS = min(32, (os.cpu_count() or 1) + 4) + 2


@pytest.fixture(scope="module")
def redis_url(redis_server) -> str:
    return f"{redis_server.url}/9"


@pytest.fixture(scope="module")
def server(redis_url):
    proc = ServerProcess("-c", "1024", "-np", "1", "-t", "1", "--state-url", redis_url)
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _unavailable(answer) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["type"] == "unavailable_error", answer.text
    assert answer.json()["error"]["code"] == "state_store_unavailable"
    assert PASSWORD not in answer.text


def test_a_redis_refusing_the_server_is_a_503_and_the_server_recovers(server, redis_server):
    import redis

    admin = redis.Redis.from_url(redis_server.url)
    with server.client() as client:
        stored = client.post("/v1/responses", json=ASK).json()
        admin.config_set("requirepass", PASSWORD)
        admin.client_kill_filter(_type="normal", skipme=True)  # the server's connections must log in again
        try:
            _unavailable(client.get(f"/v1/responses/{stored['id']}"))
            _unavailable(client.delete(f"/v1/responses/{stored['id']}"))
            _unavailable(client.post("/v1/responses", json={**ASK, "previous_response_id": stored["id"]}))
            _unavailable(client.post("/v1/responses", json=ASK))  # generated, then not stored
            streamed = client.post("/v1/responses", json={**ASK, "stream": True})
            assert streamed.status_code == 200
            events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: ")]
            assert events[-1]["type"] == "response.failed", events[-1]
            assert events[-1]["response"]["error"]["code"] == "state_store_unavailable"
            chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                             "max_tokens": 2})
            assert chat.status_code == 200 and client.get("/health").status_code == 200
        finally:
            admin.config_set("requirepass", "")
            admin.close()
        assert client.get(f"/v1/responses/{stored['id']}").json()["id"] == stored["id"]
        again = client.post("/v1/responses", json={**ASK, "previous_response_id": stored["id"]})
        assert again.status_code == 200, again.text
    assert PASSWORD not in server.log() and "Traceback" not in server.log()


def test_a_redis_that_stops_answering_does_not_stall_the_server(server, redis_server):
    with server.client() as client:
        stored = client.post("/v1/responses", json=ASK).json()
        os.kill(redis_server.process.pid, signal.SIGSTOP)
        try:
            # more reads than asyncio's default pool has threads (cores + 4), which renders chat templates
            with concurrent.futures.ThreadPoolExecutor(READS) as pool:
                reads = [pool.submit(client.get, f"/v1/responses/{stored['id']}") for _ in range(READS)]
                for _ in range(5):  # a window in which the reads wait on Redis (its socket timeout is 10 s)
                    assert client.get("/health", timeout=2).status_code == 200
                    time.sleep(0.2)
                chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                                 "max_tokens": 2}, timeout=8)
                assert chat.status_code == 200, chat.text
                assert not any(read.done() for read in reads)
                os.kill(redis_server.process.pid, signal.SIGCONT)
                assert {read.result().status_code for read in reads} <= {200, 503}
        finally:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        assert client.get(f"/v1/responses/{stored['id']}").status_code == 200


def test_cancelling_a_background_job_while_redis_stops_answering_does_not_stall_the_server(server, redis_server):
    """The cancelled object is recorded on a store thread and the job's status changes by
    the job board's writer: the event loop never waits on the stalled store."""
    with server.client() as client:
        job = client.post("/v1/responses", json={"input": "Write a very long story about the sea.", "background": True,
                                                  "max_output_tokens": 900, "temperature": 0}).json()
        os.kill(redis_server.process.pid, signal.SIGSTOP)
        try:
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                cancel = pool.submit(client.post, f"/v1/responses/{job['id']}/cancel", timeout=60)
                for _ in range(5):  # the cancel waits on Redis meanwhile (its socket timeout is 10 s)
                    # answered at once (503 "no slot available" while the job holds the one slot)
                    assert client.get("/health", timeout=2).status_code in (200, 503)
                    time.sleep(0.2)
                os.kill(redis_server.process.pid, signal.SIGCONT)
                assert cancel.result().status_code in (200, 503)
        finally:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while client.get(f"/v1/responses/{job['id']}").json()["status"] in ("queued", "in_progress"):
            assert time.monotonic() < deadline, "the job never ended"
            time.sleep(0.2)
