"""A client that leaves while its long prompt is prefilled frees its slot within a
micro-batch, not once the whole prompt is in: a lone prompt is prefilled a micro-batch
a step, and the engine sees the cancel between steps."""

from __future__ import annotations

import json
import random
import socket
import time

import pytest

from tests.server_process import ServerProcess

WORDS = "alpha beta gamma delta river mountain cloud stone light paper window garden music silver".split()


@pytest.fixture(scope="module")
def server():
    proc = ServerProcess("-c", "4096", "-np", "1", "-b", "4096", "-ub", "512")  # a batch could hold it all
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _prompt(seed: int, n_words: int) -> str:
    rng = random.Random(seed)
    return f"{seed} " + " ".join(rng.choice(WORDS) for _ in range(n_words))


def _busy(client) -> bool:
    return any(row.get("is_processing") for row in client.get("/slots").json())


def test_a_client_gone_during_a_long_prefill_frees_the_slot_within_a_micro_batch(server):
    with server.client(timeout=120) as client:
        # this host's prefill speed, from one micro-batch's worth of prompt
        probe = client.post("/completion", json={"prompt": _prompt(1, 500), "n_predict": 1, "cache_prompt": False})
        assert probe.status_code == 200
        per_second = probe.json()["timings"]["prompt_per_second"]
        prompt = _prompt(2, 3500)
        n_prompt = len(client.post("/tokenize", json={"content": prompt}).json()["tokens"])
        assert n_prompt >= 3000  # seven micro-batches of 512
        whole = n_prompt / per_second  # what the prompt takes at that speed (longer, at depth)

        body = json.dumps({"prompt": prompt, "n_predict": 64, "stream": True, "cache_prompt": False}).encode()
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n" % len(body) + body)
        deadline = time.monotonic() + 30
        while not _busy(client):
            assert time.monotonic() < deadline, "the request never reached its slot"
            time.sleep(0.02)
        sock.close()
        gone = time.monotonic()
        while _busy(client):
            assert time.monotonic() - gone < whole + 30, "the slot stayed busy"
            time.sleep(0.02)
        freed = time.monotonic() - gone
    # one micro-batch under way when the cancel lands, and the next perhaps begun: about
    # two sevenths of the prompt; the whole prompt at once would take all of it
    assert freed < 0.45 * whole + 0.5, (freed, whole)
