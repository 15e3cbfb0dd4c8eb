"""--cache-reuse N, as llama-server's: when a prompt drops a middle part of what a slot
holds (a chat client cutting its oldest turns), the runs of N or more tokens that follow
are moved into place instead of prefilled again. Moved keys are re-rotated, so the
answer may differ from a fresh prefill's, as llama-server's does: both servers reuse
the same tokens and answer the same text, token for token. Without the flag only the
shared prefix is reused."""

from __future__ import annotations

import pytest

from tests.reference_server import BUILD_HINT, ReferenceServer, reference_binary, same_attention
from tests.server_process import ServerProcess

pytestmark = pytest.mark.slow
SYSTEM = "You are a careful assistant who answers questions about rivers, towns and trades. "
DROPPED = " ".join(f"Old note {i}: the market of town {i} sold copper, bread and timber." for i in range(12))
KEPT = " ".join(f"Recent note {i}: the harbor of village {i} repairs boats before winter." for i in range(16))


def _ask(client, prompt: str, **extra) -> dict:
    answer = client.post("/completion", json={"prompt": prompt, "n_predict": 8, "temperature": 0, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _sequence(proc, **per_request) -> tuple[int, int, dict, dict]:
    with proc.client() as client:
        n_system = len(client.post("/tokenize", json={"content": SYSTEM}).json()["tokens"])
        n_kept = len(client.post("/tokenize", json={"content": KEPT, "add_special": False}).json()["tokens"])
        _ask(client, SYSTEM + DROPPED + " " + KEPT + " Question one?")
        reused = _ask(client, SYSTEM + KEPT + " Question two?", **per_request)
        fresh = _ask(client, SYSTEM + KEPT + " Question two?", cache_prompt=False)
    return n_system, n_kept, reused, fresh


def _mlxcel(*flags: str, **per_request) -> tuple[tuple[int, int, dict, dict], list[str]]:
    proc = ServerProcess("-c", "2048", "-np", "1", "--spec-type", "none", *flags)
    try:
        proc.wait_ready()
        return _sequence(proc, **per_request), same_attention(proc)
    finally:
        proc.stop()


def test_runs_past_the_prefix_are_moved_as_llama_server_moves_them():
    binary = reference_binary()
    if binary is None:
        pytest.skip(f"the reference llama-server is not built: {BUILD_HINT}")
    (n_system, n_kept, reused, fresh), attention = _mlxcel("--cache-reuse", "16")
    reference = ReferenceServer(binary, "SmolLM2-135M-Instruct.Q4_1.gguf", "-c", "2048", "-np", "1",
                                "--cache-reuse", "16", *attention)
    try:
        reference.wait_ready()
        _, _, theirs, theirs_fresh = _sequence(reference)
    finally:
        reference.stop()
    assert reused["timings"]["cache_n"] >= n_system + n_kept - 8, (reused["timings"], n_system, n_kept)
    assert reused["timings"]["prompt_n"] < 16  # what follows the moved run, and the question
    assert (reused["timings"]["cache_n"], reused["timings"]["prompt_n"]) == \
        (theirs["timings"]["cache_n"], theirs["timings"]["prompt_n"])
    assert reused["content"] == theirs["content"] and fresh["content"] == theirs_fresh["content"]


def test_without_the_flag_only_the_prefix_is_reused():
    (n_system, _, reused, fresh), _ = _mlxcel()
    assert reused["timings"]["cache_n"] < n_system + 8
    assert reused["content"] == fresh["content"]


def test_a_request_sets_its_own_least_run():
    """llama-server's n_cache_reuse field: a request turns chunk reuse on (or off) for itself."""
    (n_system, n_kept, asked, _), _ = _mlxcel(n_cache_reuse=16)
    assert asked["timings"]["cache_n"] >= n_system + n_kept - 8
    (n_system, _, declined, _), _ = _mlxcel("--cache-reuse", "16", n_cache_reuse=0)
    assert declined["timings"]["cache_n"] < n_system + 8


@pytest.mark.parametrize("value", [-1, 2**31, 1.5, "many", [16], None])
def test_bad_n_cache_reuse_values_are_400s(http, value):
    answer = http.post("/completion", json={"prompt": "Hi", "n_predict": 1, "n_cache_reuse": value})
    assert answer.status_code == (200 if value is None else 400), answer.text
