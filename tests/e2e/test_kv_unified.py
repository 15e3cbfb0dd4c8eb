"""--kv-unified on a real llama.cpp context: one KV pool every slot draws from, so a
slot may hold more than -c / -np tokens (up to --kv-unified-per-slot), a prefix held
by one slot is shared by another, and idle slots are saved to the host cache and
cleared when another slot takes a request (as llama-server does), so their prefixes
come back from there."""

from __future__ import annotations

import pytest

from tests.server_process import ServerProcess

pytestmark = pytest.mark.timeout(300)

WORDS = "river mountain engine garden letter window market winter summer village teacher doctor".split()


def words(seed: int, n: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 5) % len(WORDS)] + str(i % 10) for i in range(n))


@pytest.fixture(scope="module")
def unified():
    proc = ServerProcess("-c", "1024", "-np", "2", "--kv-unified", "--kv-unified-per-slot", "768", "--metrics")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _complete(client, prompt: str, n: int = 8) -> dict:
    response = client.post("/completion", json={"prompt": prompt, "n_predict": n, "temperature": 0,
                                                "cache_prompt": True})
    assert response.status_code == 200, response.text
    return response.json()


def test_a_slot_holds_more_than_its_share_of_the_pool_up_to_the_cap(unified):
    with unified.client() as client:
        props = client.get("/props").json()
        assert (props["n_ctx"], props["n_ctx_slot"]) == (1024, 768)  # not 1024 / 2
        long = words(1, 260)
        n = len(client.post("/tokenize", json={"content": long}).json()["tokens"])
        assert 512 < n < 760, n
        assert _complete(client, long)["tokens_predicted"] == 8
        too_long = client.post("/completion", json={"prompt": words(2, 400), "n_predict": 4})
        assert too_long.status_code == 400 and "context" in too_long.text


def test_idle_slots_give_their_cells_back_and_prefixes_come_back_from_the_host_cache(unified):
    with unified.client() as client:
        first = words(3, 260)  # over 512 tokens each: two of them do not fit the pool together
        second = words(4, 260)
        n_first = len(client.post("/tokenize", json={"content": first}).json()["tokens"])
        assert n_first > 512
        a = _complete(client, first)
        b = _complete(client, second)  # the idle first slot is saved, then cleared (two would not fit)
        again = _complete(client, first + " more")
        assert again["timings"]["cache_n"] >= n_first - 16  # the first prompt's prefix came back
        assert again["timings"]["prompt_n"] < 64
        assert a["content"] and b["content"]
        metrics = client.get("/metrics").text
        assert "llamacpp:prompt_tokens_cached_total" in metrics
