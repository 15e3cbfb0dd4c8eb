"""Continuous batching, chunked prefill and slot reuse on the shared 4-slot server."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

PROMPTS = ["Once upon a time", "def fibonacci(n):", "The capital of France is", "List three colors:"]


def _complete(client, prompt, n=32, **extra):
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "cache_prompt": False, **extra}
    return client.post("/completion", json=body).json()


def test_concurrent_greedy_requests_match_each_alone(server):
    with server.client() as client:
        alone = [_complete(client, p)["content"] for p in PROMPTS]
    with ThreadPoolExecutor(4) as pool:
        def run(prompt):
            with server.client() as client:
                return _complete(client, prompt)
        together = list(pool.map(run, PROMPTS))
    assert [r["content"] for r in together] == alone
    assert len({r["id_slot"] for r in together}) == 4  # they really ran in four slots at once


def test_new_request_joins_while_another_is_generating(server):
    events = []
    started = threading.Event()

    def long_stream():
        with server.client() as client, client.stream("POST", "/completion", json={
            "prompt": "Once upon a time", "n_predict": 400, "temperature": 0, "ignore_eos": True, "stream": True
        }) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    started.set()
                    if json.loads(line[6:])["stop"]:
                        events.append(("long done", time.monotonic()))

    thread = threading.Thread(target=long_stream)
    thread.start()
    assert started.wait(60)
    with server.client() as client:
        short = _complete(client, "Hello", n=4)
    events.append(("short done", time.monotonic()))
    thread.join(120)
    assert short["tokens_predicted"] == 4
    assert [name for name, _ in sorted(events, key=lambda e: e[1])] == ["short done", "long done"]


def test_long_prompt_is_prefilled_in_chunks_between_decode_steps(server, http):
    """A running stream keeps receiving tokens while a ~900-token prompt is prefilled."""
    long_prompt = " ".join(f"item{i} is number {i}." for i in range(95))
    n_long = len(http.post("/tokenize", json={"content": long_prompt}).json()["tokens"])
    assert 700 < n_long < 1000
    arrivals: list[float] = []
    running = threading.Event()

    def running_stream():
        with server.client() as client, client.stream("POST", "/completion", json={
            "prompt": "Count: 1, 2, 3,", "n_predict": 300, "temperature": 0, "ignore_eos": True, "stream": True,
            "cache_prompt": False,
        }) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    arrivals.append(time.monotonic())
                    if len(arrivals) == 10:
                        running.set()

    thread = threading.Thread(target=running_stream)
    thread.start()
    assert running.wait(60)
    sent = time.monotonic()
    with server.client() as client, client.stream("POST", "/completion", json={
        "prompt": long_prompt, "n_predict": 1, "temperature": 0, "stream": True, "cache_prompt": False
    }) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                first_token = time.monotonic()
                break
    thread.join(120)
    during_prefill = [t for t in arrivals if sent < t < first_token]
    # 900 tokens in chunks of 256 leave room for a decode step between chunks
    assert len(during_prefill) >= 2, (len(during_prefill), first_token - sent)


def test_slot_reuses_a_shared_prompt_prefix(http):
    prefix = "Here is a long shared system preamble for caching. " * 12
    first = http.post("/completion", json={"prompt": prefix + "First question?", "n_predict": 2,
                                           "temperature": 0}).json()
    second = http.post("/completion", json={"prompt": prefix + "Second question?", "n_predict": 2,
                                            "temperature": 0}).json()
    n_prefix = len(http.post("/tokenize", json={"content": prefix}).json()["tokens"])
    assert first["timings"]["prompt_n"] + first["timings"]["cache_n"] == first["tokens_evaluated"]
    assert second["timings"]["cache_n"] >= n_prefix - 2
    assert second["timings"]["prompt_n"] == second["tokens_evaluated"] - second["timings"]["cache_n"]


def test_cache_prompt_false_prefills_cold(http):
    prompt = "A prompt that is sent twice to check cold prefill. " * 8
    http.post("/completion", json={"prompt": prompt, "n_predict": 2, "temperature": 0})
    cold = http.post("/completion", json={"prompt": prompt, "n_predict": 2, "temperature": 0,
                                          "cache_prompt": False}).json()
    assert cold["timings"]["cache_n"] == 0
    assert cold["timings"]["prompt_n"] == cold["tokens_evaluated"]
    # the OpenAI SDK's extra_body nesting is honoured too
    nested = http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2, "temperature": 0,
                                                "extra_body": {"cache_prompt": False}}).json()
    assert nested["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    for _ in range(2):
        warm = http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 2, "temperature": 0}).json()
    assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
