"""A stop (SIGINT, Ctrl-C) while answers are still being generated: uvicorn waits a
grace period for open responses and then cancels them, each with a traceback, and a
cancelled stream is cut mid-chunk. The server ends those requests itself before that:
every stream ends in its API's order (chat: finish_reason "error" and [DONE]; the native
route and Anthropic: an error event naming the stop; Responses: response.failed naming
it), a whole answer is a 503 a client may retry elsewhere, and the process exits 0 with
nothing in its log but the stop."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import httpx
import pytest

from tests.server_process import ServerProcess

pytestmark = pytest.mark.slow

LONG = {"max_tokens": 4000, "ignore_eos": True, "temperature": 0}
ASK = [{"role": "user", "content": "Tell me a long story about a lighthouse."}]


class _Answer:
    """One request on its own thread: its status, the data lines it read, and whether its
    body was read to its end (a cut chunked body raises)."""

    def __init__(self, base_url: str, path: str, body: dict) -> None:
        self.status: int | None = None
        self.lines: list[str] = []
        self.ended = False
        self.error: Exception | None = None
        self.started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(base_url, path, body), daemon=True)
        self._thread.start()

    def _run(self, base_url: str, path: str, body: dict) -> None:
        try:
            with httpx.Client(base_url=base_url, timeout=60) as client, \
                    client.stream("POST", path, json=body) as response:
                self.status = response.status_code
                if not body.get("stream"):
                    self.started.set()
                for line in response.iter_lines():
                    if line:
                        self.lines.append(line)
                        self.started.set()
            self.ended = True
        except Exception as exc:  # noqa: BLE001 - the test reads it
            self.error = exc
        finally:
            self.started.set()

    def join(self) -> None:
        self._thread.join(30)
        assert not self._thread.is_alive()

    def data(self) -> list:
        return [json.loads(line[6:]) if line[6:] != "[DONE]" else "[DONE]"
                for line in self.lines if line.startswith("data: ")]


def test_answers_running_at_a_stop_end_in_order_and_the_server_exits_cleanly():
    proc = ServerProcess("-c", "10240", "-np", "5", "--spec-type", "none")
    try:
        proc.wait_ready()
        url = proc.base_url
        chat = _Answer(url, "/v1/chat/completions", {"messages": ASK, "stream": True, **LONG})
        native = _Answer(url, "/completion", {"prompt": "Once upon a time", "stream": True, "n_predict": 4000,
                                              "ignore_eos": True})
        anthropic = _Answer(url, "/v1/messages", {"model": "m", "messages": ASK, "stream": True,
                                                  "max_tokens": 4000})
        responses = _Answer(url, "/v1/responses", {"input": ASK, "stream": True, "max_output_tokens": 4000})
        for answer in (chat, native, anthropic, responses):
            assert answer.started.wait(60)
        whole = _Answer(url, "/v1/chat/completions", {"messages": ASK, **LONG})
        deadline = time.monotonic() + 60
        while proc.client().get("/slots").json() and sum(
                slot["is_processing"] for slot in proc.client().get("/slots").json()) < 5:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        stopped_at = time.monotonic()
        proc.process.send_signal(signal.SIGINT)
        try:
            code = proc.process.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail("the server did not exit within 30 s of SIGINT")
        took = time.monotonic() - stopped_at
        for answer in (chat, native, anthropic, responses, whole):
            answer.join()
        log = proc.log()
    finally:
        proc.stop()
    assert code == 0 and "Traceback" not in log and "Cancel" not in log, log[-3000:]
    assert took < 15, took
    for answer in (chat, native, anthropic, responses, whole):
        assert answer.ended and answer.error is None, (answer.error, answer.lines[-3:])

    chat_events = chat.data()
    assert chat_events[-1] == "[DONE]"
    assert chat_events[-2]["choices"][0]["finish_reason"] == "error"  # the spec's streamed failure
    assert sum(bool(e["choices"][0]["delta"].get("content")) for e in chat_events[1:-2]) > 0

    native_events = native.data()
    assert native_events[-1]["error"]["type"] == "server_busy"
    assert native_events[-1]["error"]["code"] == "server_shutting_down"
    assert any(e.get("content") for e in native_events[:-1])

    assert "event: error" in anthropic.lines
    error = json.loads(anthropic.lines[anthropic.lines.index("event: error") + 1][6:])
    assert error["type"] == "error" and "shutting down" in error["error"]["message"]

    assert responses.lines[-2] == "event: response.failed"
    failed = json.loads(responses.lines[-1][6:])["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "the server is shutting down"}

    assert whole.status == 503
    body = json.loads(whole.lines[0])
    assert body["error"]["code"] == "server_shutting_down" and body["error"]["type"] == "server_busy"
