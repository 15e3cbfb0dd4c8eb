"""Preparing a request (parsing a large body, rendering the template, tokenizing)
never stalls the event loop: /health keeps answering quickly meanwhile."""

from __future__ import annotations

import time

import pytest

from tests.health_probe import health_latencies_while

HEALTH_BUDGET_S = 0.1
WORDS = "The quick brown fox jumps over the lazy dog while the engine keeps serving. "


def _big_text(chars: int) -> str:
    return (WORDS * (chars // len(WORDS) + 1))[:chars]


def _prepare_requests(text: str) -> list[tuple[str, dict]]:
    message = [{"role": "user", "content": text}]
    return [
        ("/tokenize", {"content": text}),
        ("/v1/chat/completions", {"messages": message, "max_tokens": 1}),
        ("/v1/messages/count_tokens", {"model": "m", "messages": message}),
        ("/completion", {"prompt": text, "n_predict": 1}),
        ("/detokenize", {"tokens": [28120, 905] * 200_000}),  # "hello world" over and over
    ]


@pytest.mark.parametrize("path, body", _prepare_requests(_big_text(1_000_000)), ids=lambda v: v if isinstance(v, str)
                         else "")
def test_health_answers_while_a_large_request_is_prepared(server, path, body):
    def send() -> dict:
        with server.client(timeout=120) as client:
            started = time.monotonic()
            status = client.post(path, json=body).status_code
            return {"status": status, "seconds": time.monotonic() - started}

    latencies, [outcome] = health_latencies_while(server, [send])
    # the prompt is far beyond the 1,024-token slot: generation routes refuse it after tokenizing
    assert outcome["status"] in (200, 400), outcome
    assert outcome["seconds"] > 0.1, "the request was too cheap to show anything"
    assert len(latencies) >= 5
    assert max(latencies) < HEALTH_BUDGET_S, f"slowest /health {max(latencies):.3f}s during {outcome}"


def test_a_fresh_servers_first_seconds_never_stall_the_event_loop():
    """Whatever a server learns about its model once it is ready (the memory monitor's
    first tick wants the GGUF header's KV geometry) is not read on the event loop."""
    from tests.server_process import ServerProcess

    proc = ServerProcess("-c", "1024", "-np", "1")
    try:
        proc.wait_ready()
        latencies = []
        with proc.client() as client:
            client.get("/health")
            ends = time.monotonic() + 2.0  # four of the monitor's ticks
            while time.monotonic() < ends:
                started = time.monotonic()
                assert client.get("/health").status_code == 200
                latencies.append(time.monotonic() - started)
                time.sleep(0.01)
    finally:
        proc.stop()
    assert len(latencies) >= 20
    assert max(latencies) < HEALTH_BUDGET_S, f"slowest /health {max(latencies):.3f}s in a fresh server's first 2 s"
