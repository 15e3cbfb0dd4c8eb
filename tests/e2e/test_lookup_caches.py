"""llama.cpp's lookup caches (-lcs, -lcd) drafted from beside prompt lookup: drafts
accepted from them, greedy output unchanged, the dynamic cache written at exit in
llama.cpp's format, and files that are not lookup caches refused at start.

Sequences stay under 256 positions, where a verify batch's logits are bit-identical to
single decodes' (see test_speculative)."""

from __future__ import annotations

import subprocess
import sys

from mlxcel.engine.lookup_cache import NGRAM_MAX, read_counts, write_counts
from tests.server_process import ServerProcess

PROMPT = "Write a short story about a lighthouse keeper who finds a map.\n"
DRAFT_ALWAYS = {"MLXCEL_SPEC_COST_MODEL": "0"}  # every proposed draft verified (see test_speculative)
N_VOCAB = 49152  # SmolLM2's


def _server(*args: str) -> ServerProcess:
    # no traffic drafts: whatever drafts a repeated request's reply comes from the caches
    return ServerProcess("-c", "2048", "-np", "2", "--metrics", "--spec-ngram-traffic", "0", *args,
                         env=DRAFT_ALWAYS).wait_ready()


def _story(client, cache_prompt: bool) -> dict:
    return client.post("/completion", json={"prompt": PROMPT, "n_predict": 120, "temperature": 0,
                                            "cache_prompt": cache_prompt, "return_tokens": True}).json()


def _accepted_from_caches(client) -> float:
    lines = client.get("/metrics").text.splitlines()
    return sum(float(line.split()[1]) for line in lines
               if line.startswith("mlxcel_spec_lookup_cache_accepted_tokens_total"))


def test_the_dynamic_cache_drafts_what_the_server_wrote_and_is_saved_at_exit(tmp_path):
    path = tmp_path / "dynamic.bin"
    proc = _server("--lookup-cache-dynamic", str(path))
    try:
        with proc.client() as client:
            first = _story(client, cache_prompt=True)
            # an n-gram drafts once it was followed by the same token twice (llama.cpp's thresholds)
            assert _story(client, cache_prompt=True)["content"] == first["content"]
            assert _accepted_from_caches(client) == 0
            assert _story(client, cache_prompt=True)["content"] == first["content"]
            assert _accepted_from_caches(client) > 0
    finally:
        proc.stop()  # SIGTERM: the engine writes the counts as it stops
    counts = read_counts(path, N_VOCAB)
    tokens = first["tokens"]
    # the reply's n-grams (its last token was never decoded, so never counted as a follower)
    assert counts[tuple(tokens[10:10 + NGRAM_MAX])][tokens[10 + NGRAM_MAX]] == 3
    assert "dynamic lookup cache written" in proc.log_path.read_text()


def test_a_static_cache_drafts_for_a_request_that_reuses_nothing(tmp_path):
    plain = _server("--spec-type", "none")
    try:
        with plain.client() as client:
            reference = _story(client, cache_prompt=False)
    finally:
        plain.stop()
    tokens = reference["tokens"]
    counts: dict = {}
    for a, b, c in zip(tokens, tokens[1:], tokens[2:]):  # as llama-lookup-create counts a corpus: 2-grams
        part = counts.setdefault((a, b), {})
        part[c] = part.get(c, 0) + 3
    path = tmp_path / "static.bin"
    write_counts(path, counts)
    proc = _server("-lcs", str(path))
    try:
        with proc.client() as client:
            drafted = _story(client, cache_prompt=False)
            assert drafted["content"] == reference["content"]
            assert drafted["timings"]["draft_n_accepted"] > 0
            assert _accepted_from_caches(client) > 0
    finally:
        proc.stop()


def _serve_exits(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlxcel", "serve", "-m", "smollm2-135m-instruct", "--port", "0",
                           *args], capture_output=True, text=True, timeout=120)


def test_a_file_that_is_not_a_lookup_cache_is_refused_at_start(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x05\x00\x00\x00" * 5 + b"\x07\x00")  # an n-gram, a count of 5, then half a token
    done = _serve_exits("-lcs", str(bad))
    assert done.returncode != 0 and f"--lookup-cache-static {bad}: not a lookup cache" in done.stderr
    missing = _serve_exits("--lookup-cache-static", str(tmp_path / "missing.bin"))
    assert missing.returncode != 0 and "missing.bin: no such file" in missing.stderr
    no_folder = _serve_exits("-lcd", str(tmp_path / "gone" / "dynamic.bin"))
    assert no_folder.returncode != 0 and "its folder does not exist" in no_folder.stderr
