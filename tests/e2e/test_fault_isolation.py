"""Fault isolation on a real model: one request's failure fails it alone, a refused
batch is split and retried, and a failure of the engine itself answers 503 to
everyone, says why on /health and ends the process with a non-zero status.

Faults are injected per request with the X-Mlxcel-Fault header, which the server
honours only when started with MLXCEL_FAULT_INJECTION=1."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.server_process import ServerProcess

FAULTS = {"MLXCEL_FAULT_INJECTION": "1"}
NORMAL = {"prompt": "The history of the printing press begins", "n_predict": 48, "temperature": 0,
          "ignore_eos": True, "cache_prompt": False}
VICTIM = {"prompt": "A recipe for bread: first", "n_predict": 12, "temperature": 0, "ignore_eos": True,
          "cache_prompt": False}


def _start() -> ServerProcess:
    return ServerProcess("-c", "2048", "-np", "2", env=FAULTS).wait_ready()


@pytest.fixture(scope="module")
def faulty():
    proc = _start()
    try:
        yield proc
    finally:
        proc.stop()


class Background:
    """A streamed /completion running on its own thread, started once it generates."""

    def __init__(self, server: ServerProcess, body: dict) -> None:
        self.text = ""
        self.events: list[dict] = []
        self.error: BaseException | None = None
        self._generating = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(server, body))
        self._thread.start()
        assert self._generating.wait(60), "the background stream never generated"

    def _run(self, server: ServerProcess, body: dict) -> None:
        try:
            with server.client() as client, client.stream("POST", "/completion", json={**body, "stream": True}) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        event = json.loads(line[6:])
                        self.events.append(event)
                        self.text += event.get("content", "")
                        self._generating.set()
        except BaseException as exc:  # noqa: BLE001 - reported by join()
            self.error = exc
        finally:
            self._generating.set()

    def join(self) -> Background:
        self._thread.join(120)
        assert not self._thread.is_alive(), "the background stream hung"
        return self


def _complete(server: ServerProcess, body: dict, fault: str | None = None) -> httpx.Response:
    headers = {"X-Mlxcel-Fault": fault} if fault else {}
    with server.client() as client:
        return client.post("/completion", json=body, headers=headers)


@pytest.fixture(scope="module")
def reference(faulty) -> dict[str, str]:
    """What each prompt generates alone, with no fault anywhere."""
    return {name: _complete(faulty, body).json()["content"] for name, body in (("normal", NORMAL),
                                                                               ("victim", VICTIM))}


def _assert_healthy(server: ServerProcess) -> None:
    with server.client() as client:
        assert client.get("/health").json()["status"] == "ok"
        response = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4})
        assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"]
        slots = client.get("/slots").json()
        assert all(slot["state"] == "idle" for slot in slots)


@pytest.mark.parametrize("fault", ["sample", "admit", "decode"])
def test_a_request_that_breaks_fails_alone(faulty, reference, fault):
    other = Background(faulty, NORMAL)
    response = _complete(faulty, VICTIM, fault)
    assert response.status_code == 500, response.text
    error = response.json()["error"]
    assert error["type"] == "server_error" and "engine request" in error["message"]
    other.join()
    assert other.error is None and other.text == reference["normal"]
    assert other.events[-1]["stop"] is True
    _assert_healthy(faulty)


def test_a_failing_stream_ends_with_an_error_event(faulty):
    with faulty.client() as client, client.stream("POST", "/completion", json={**VICTIM, "stream": True},
                                                  headers={"X-Mlxcel-Fault": "sample"}) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events and events[-1]["error"]["type"] == "server_error"
    with faulty.client() as client:
        response = client.post("/v1/chat/completions", headers={"X-Mlxcel-Fault": "sample"}, json={
            "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4})
    assert response.status_code == 500 and response.json()["error"]["type"] == "server_error"
    _assert_healthy(faulty)


def test_a_refused_batch_is_split_and_everyone_is_served(faulty, reference):
    """The victim makes llama_decode refuse any batch it shares: both requests still
    get exactly what they generate alone."""
    other = Background(faulty, NORMAL)
    response = _complete(faulty, VICTIM, "split")
    other.join()
    assert response.status_code == 200 and response.json()["content"] == reference["victim"]
    assert other.error is None and other.text == reference["normal"]
    assert "llama_decode returned 1 for a batch" in faulty.log()
    _assert_healthy(faulty)


def test_without_injection_enabled_the_header_does_nothing(server):
    with server.client() as client:
        response = client.post("/completion", json={**VICTIM, "n_predict": 2}, headers={"X-Mlxcel-Fault": "sample"})
    assert response.status_code == 200


def _assert_engine_down(server: ServerProcess, reason: str) -> None:
    with server.client(timeout=5) as client:
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "error"
        assert reason in health.json()["error"]
        started = time.monotonic()
        for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                           ("/completion", {"prompt": "hi"}), ("/v1/messages", {
                               "model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})):
            response = client.post(path, json=body)
            assert response.status_code == 503, (path, response.text)
        assert time.monotonic() - started < 2.0  # at once, nothing waits on a dead engine
    assert server.process.wait(30) != 0
    assert server.log().count(reason) >= 1


def test_a_broken_context_fails_everyone_with_503_and_exits(faulty):
    other = Background(faulty, {**NORMAL, "n_predict": 400})
    response = _complete(faulty, VICTIM, "context")
    assert response.status_code == 503, response.text
    assert response.json()["error"]["type"] == "unavailable_error"
    other.join()
    assert other.events and "error" in other.events[-1]  # the running stream ended with an error event
    _assert_engine_down(faulty, "the llama context failed")


def test_the_engine_thread_dying_is_a_503_and_an_exit():
    proc = _start()
    try:
        response = _complete(proc, VICTIM, "crash")
        assert response.status_code == 503 and response.json()["error"]["code"] == "engine_failed"
        _assert_engine_down(proc, "the engine thread crashed")
    finally:
        proc.stop()
