"""Priority order, queue cap and disconnects, on a one-slot server with a small queue."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from tests.server_process import ServerProcess


@pytest.fixture(scope="module")
def one_slot():
    proc = ServerProcess("-c", "1024", "-np", "1", "--queue-cap", "3")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _occupy(server, n_predict=120) -> tuple[threading.Thread, threading.Event]:
    """Start a streaming request that holds the only slot; returns once it generates."""
    generating = threading.Event()

    def run():
        with server.client() as client, client.stream("POST", "/completion", json={
            "prompt": "Once upon a time", "n_predict": n_predict, "temperature": 0, "ignore_eos": True,
            "stream": True, "cache_prompt": False,
        }) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    generating.set()

    thread = threading.Thread(target=run)
    thread.start()
    assert generating.wait(60)
    return thread, generating


def _wait_idle(server, timeout=10.0) -> float:
    start = time.monotonic()
    with server.client() as client:
        while time.monotonic() - start < timeout:
            if all(s["state"] == "idle" for s in client.get("/slots").json()):
                return time.monotonic() - start
            time.sleep(0.02)
    raise AssertionError("the slot was not freed")


def test_health_says_no_slot_available_while_every_slot_is_busy(one_slot):
    holder, _ = _occupy(one_slot, n_predict=80)
    with one_slot.client() as client:
        response = client.get("/health")
    holder.join(120)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "no slot available"
    assert body["batch"]["active_sequences"] == 1 and body["batch"]["max_batch_size"] == 1
    assert body["context_size"] == 1024 and "observability" in body
    with one_slot.client() as client:
        assert client.get("/health").json()["status"] == "ok"


def test_slots_lists_the_waiting_requests_after_the_slots(one_slot):
    holder, _ = _occupy(one_slot, n_predict=200)
    waiting = threading.Thread(target=lambda: httpx.post(f"{one_slot.base_url}/completion", timeout=120,
                                                         json={"prompt": "queued", "n_predict": 1}))
    waiting.start()
    try:
        with one_slot.client() as client:
            deadline = time.monotonic() + 30
            while len(rows := client.get("/slots").json()) < 2:
                assert time.monotonic() < deadline, rows
                time.sleep(0.05)
            probe = client.get("/slots?fail_on_no_slot=1")  # llama-server's: 503 while no slot is idle
            assert probe.status_code == 503 and probe.json()["error"]["message"] == "no slot available"
            assert probe.json()["error"]["type"] == "unavailable_error"
    finally:
        waiting.join(120)
        holder.join(120)
    slot, queued = rows
    assert (slot["id"], slot["is_processing"]) == (0, True)
    assert {k: queued[k] for k in ("id", "state", "is_processing", "n_decoded", "context_size")} == {
        "id": 1, "state": "queued", "is_processing": False, "n_decoded": 0, "context_size": 1024}
    assert queued["id_task"] != slot["id_task"] and queued["n_prompt_tokens"] > 0
    _wait_idle(one_slot)
    with one_slot.client() as client:
        assert [row["id"] for row in client.get("/slots").json()] == [0]
        assert client.get("/slots?fail_on_no_slot=1").status_code == 200


def test_priority_orders_the_queue(one_slot):
    holder, _ = _occupy(one_slot)
    finished: list[str] = []
    lock = threading.Lock()

    def send(priority: str):
        with one_slot.client() as client:
            client.post("/completion", headers={"X-Priority": priority},
                        json={"prompt": f"{priority} request", "n_predict": 3, "temperature": 0})
        with lock:
            finished.append(priority)

    threads = []
    for priority in ("low", "normal", "high"):
        thread = threading.Thread(target=send, args=(priority,))
        thread.start()
        threads.append(thread)
        time.sleep(0.3)  # arrive in this order while the slot is busy
    for thread in threads + [holder]:
        thread.join(120)
    assert finished == ["high", "normal", "low"]


def test_unknown_priority_counts_as_normal_and_fifo_within_a_level(one_slot):
    holder, _ = _occupy(one_slot)
    finished: list[str] = []
    lock = threading.Lock()

    def send(name: str, priority: str):
        with one_slot.client() as client:
            client.post("/completion", headers={"X-Priority": priority},
                        json={"prompt": name, "n_predict": 2, "temperature": 0})
        with lock:
            finished.append(name)

    threads = []
    for name, priority in (("first", "urgent!"), ("second", "normal"), ("third", "LOW")):
        threads.append(threading.Thread(target=send, args=(name, priority)))
        threads[-1].start()
        time.sleep(0.3)
    for thread in threads + [holder]:
        thread.join(120)
    assert finished == ["first", "second", "third"]


def test_full_queue_answers_503_before_any_stream_starts(one_slot):
    holder, _ = _occupy(one_slot, n_predict=200)
    waiting = []
    for i in range(3):  # fill the queue (cap 3)
        thread = threading.Thread(target=lambda i=i: httpx.post(
            f"{one_slot.base_url}/completion", json={"prompt": f"queued {i}", "n_predict": 1}, timeout=120))
        thread.start()
        waiting.append(thread)
    time.sleep(0.5)
    with one_slot.client() as client:
        for stream in (False, True):
            response = client.post("/v1/completions", json={"prompt": "one too many", "stream": stream})
            assert response.status_code == 503
            assert response.headers["content-type"].startswith("application/json")
            assert response.json()["error"]["type"] == "server_busy"
    for thread in waiting + [holder]:
        thread.join(120)
    with one_slot.client() as client:  # and it serves again once the queue drains
        assert client.post("/completion", json={"prompt": "after", "n_predict": 1}).status_code == 200


def test_streaming_client_disconnect_frees_the_slot(one_slot):
    with one_slot.client() as client, client.stream("POST", "/completion", json={
        "prompt": "Once upon a time", "n_predict": 2000, "ignore_eos": True, "stream": True
    }) as response:
        lines = response.iter_lines()
        while not next(lines).startswith("data: "):
            pass
    assert _wait_idle(one_slot) < 5


def test_non_streaming_client_disconnect_frees_the_slot(one_slot):
    body = json.dumps({"prompt": "Once upon a time", "n_predict": 2000, "ignore_eos": True}).encode()
    sock = socket.create_connection(("127.0.0.1", one_slot.port))
    sock.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    with one_slot.client() as client:
        deadline = time.monotonic() + 30
        while client.get("/slots").json()[0]["state"] == "idle":
            assert time.monotonic() < deadline
            time.sleep(0.02)
    sock.close()
    assert _wait_idle(one_slot) < 5


def test_disconnect_while_queued_removes_the_request(one_slot):
    holder, _ = _occupy(one_slot, n_predict=400)
    with one_slot.client() as client:
        with pytest.raises(httpx.ReadTimeout):
            client.post("/completion", json={"prompt": "never runs", "n_predict": 1000, "ignore_eos": True},
                        timeout=0.5)
        deadline = time.monotonic() + 5
        while client.get("/health").json()["batch"]["queue_depth"] != 0:  # the engine publishes its state
            assert time.monotonic() < deadline, "the abandoned request stayed queued"
            time.sleep(0.05)
    holder.join(120)


def test_stream_closed_before_its_first_event_is_cancelled(one_slot):
    """A streaming client that leaves while its request still waits in the queue:
    the request is removed, though the stream never produced an event."""
    holder, _ = _occupy(one_slot, n_predict=400)
    with one_slot.client() as client:
        with client.stream("POST", "/completion", json={"prompt": "waits", "n_predict": 1000, "ignore_eos": True,
                                                        "stream": True}) as response:
            assert response.status_code == 200
            time.sleep(0.3)  # queued behind the holder: no event yet
        deadline = time.monotonic() + 5
        while client.get("/health").json()["batch"]["queue_depth"] != 0:
            assert time.monotonic() < deadline, "the abandoned stream stayed queued"
            time.sleep(0.05)
    holder.join(120)


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/completions", {"prompt": ["a", "b", "c", "d", "e"], "max_tokens": 2}),
    ("/v1/completions", {"prompt": ["a", "b", "c", "d", "e"], "max_tokens": 2, "stream": True}),
    ("/completion", {"prompt": ["a", "b", "c", "d", "e"], "n_predict": 2}),
])
def test_more_generations_than_the_server_ever_holds_is_a_400_not_a_busy_503(one_slot, path, body):
    """One slot and a queue of 3 hold 4 generations at once: a request for 5 (one per
    prompt) could never be admitted, so a 503 asking for a retry would be a lie."""
    with one_slot.client() as client:
        response = client.post(path, json=body)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and "at most 4 at once" in error["message"]
        ok = client.post("/v1/completions", json={"prompt": ["a", "b", "c", "d"], "max_tokens": 2})
        assert ok.status_code == 200 and len(ok.json()["choices"]) == 4
    _wait_idle(one_slot)
