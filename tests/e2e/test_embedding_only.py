"""llama-server's own form: `--embedding -m MODEL` serves that model for embeddings
only, here with `--pooling none` (one vector per token) and no queue beyond the
running request."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.e2e.test_embeddings import EMBEDDING_ID, EMBEDDING_MODEL
from tests.e2e.test_weight_pages import dropped_model_path, model_file_kib
from tests.server_process import ServerProcess


@pytest.fixture(scope="module")
def only():
    proc = ServerProcess("--embedding", "--pooling", "none", "--queue-cap", "0", "--metrics", model=EMBEDDING_MODEL)
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture
def client(only):
    with only.client() as c:
        yield c


def test_pooling_none_gives_one_raw_vector_per_token(client):
    r = client.post("/embedding", json={"content": "hello world"})
    assert r.status_code == 200, r.text
    rows = np.array(r.json()[0]["embedding"])
    assert rows.shape == (4, 384)  # [CLS] hello world [SEP]
    assert all(abs(np.linalg.norm(row) - 1) > 1e-3 for row in rows)  # not normalised
    ids = client.post("/embeddings", json={"content": [[101, 7592, 2088, 102]]}).json()
    assert np.allclose(np.array(ids[0]["embedding"]), rows, atol=1e-5)


def test_the_mean_of_the_token_vectors_is_the_checkpoint_s_sentence_embedding(client):
    """Mean pooling by hand over pooling none's rows equals a numpy forward pass of
    the original checkpoint (mean-pooled, normalised)."""
    from tests.embedding_reference import BertReference, cosine
    from tests.fixtures.minilm import minilm_source

    text = "A dog runs in the park."
    rows = np.array(client.post("/embedding", json={"content": text}).json()[0]["embedding"])
    assert rows.shape == (9, 384)  # [CLS] a dog runs in the park . [SEP]
    assert cosine(rows.mean(axis=0), BertReference(minilm_source()).embed([text])[0]) >= 0.999


def test_the_openai_route_refuses_pooling_none_as_llama_server_does(client):
    r = client.post("/v1/embeddings", json={"input": "hello"})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "Pooling type 'none' is not OAI compatible. Please use a different pooling type"


def test_generation_routes_answer_as_llama_server_does_in_embedding_mode(client):
    for path, body in [("/completion", {"prompt": "hi"}), ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})]:
        r = client.post(path, json=body)
        assert r.status_code == 500, r.text
        assert r.json()["error"]["message"] == "the current context does not support logits computation. skipping"


def test_slots_and_adapters_answer_that_nothing_generates(client):
    """Monitors poll /slots and /lora-adapters: with no generating model both are empty
    lists, not the generation routes' error."""
    assert client.get("/slots").json() == []
    assert client.get("/lora-adapters").json() == []
    assert client.post("/lora-adapters", json=[]).json() == {"success": True}
    bad = client.post("/lora-adapters", json=[{"id": 0, "scale": 1}])
    assert bad.status_code == 400 and "no LoRA adapter is loaded" in bad.json()["error"]["message"]


def test_tokenize_and_detokenize_use_the_served_model_s_vocabulary(client):
    """RAG clients count and cut chunks with /tokenize: llama-server tokenizes with the
    model it serves, an embedding model too."""
    tokens = client.post("/tokenize", json={"content": "hello world"}).json()["tokens"]
    assert tokens == [7592, 2088]  # MiniLM's WordPiece ids, without [CLS]/[SEP] (add_special false)
    assert client.post("/tokenize", json={"content": "hello world", "add_special": True}).json()["tokens"] == \
        [101, 7592, 2088, 102]
    pieces = client.post("/tokenize", json={"content": "hello", "with_pieces": True}).json()["tokens"]
    assert pieces == [{"id": 7592, "piece": " hello"}]  # llama.cpp writes a WordPiece word start with its space
    assert client.post("/detokenize", json={"tokens": tokens}).json()["content"].strip() == "hello world"
    bad = client.post("/detokenize", json={"tokens": [30522]})
    assert bad.status_code == 500 and "out of vocabulary range (vocab_size 30522)" in bad.json()["error"]["message"]


def test_metrics_count_what_the_embedding_model_encoded(client):
    """--metrics on an --embedding server: the embedding model's counters, a valid
    exposition (it was a 200 with an empty body, which a scraper takes for a healthy
    target with no series), and /props says the route is on."""
    from prometheus_client.parser import text_string_to_metric_families

    def read() -> dict[str, float]:
        text = client.get("/metrics").text
        return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples}

    before = read()
    texts = ["one two three", "four"]
    tokens = sum(len(client.post("/tokenize", json={"content": t}).json()["tokens"]) for t in texts)
    assert client.post("/v1/embeddings", json={"input": texts, "encoding_format": "float"}).status_code == 400
    assert client.post("/embedding", json={"content": texts}).status_code == 200
    after = read()
    assert after["mlxcel_embedding_requests_total"] == before["mlxcel_embedding_requests_total"] + 1
    assert after["mlxcel_embedding_inputs_total"] == before["mlxcel_embedding_inputs_total"] + 2
    assert after["mlxcel_embedding_tokens_total"] - before["mlxcel_embedding_tokens_total"] >= tokens
    assert after["mlxcel_embedding_decodes_total"] > before["mlxcel_embedding_decodes_total"]
    assert after["mlxcel_embedding_queue_depth"] == 0
    assert client.get("/props").json()["endpoint_metrics"] is True


def test_health_models_and_props_describe_the_embedding_model(client):
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    models = client.get("/v1/models").json()
    assert [(m["id"], m["kind"]) for m in models["data"]] == [(EMBEDDING_ID, "embedding")]
    props = client.get("/props").json()
    assert props["model_alias"] == EMBEDDING_ID and props["embedding_model"]["pooling"] == "none"


def test_past_the_queue_cap_requests_get_503(only):
    texts = [" ".join(["word"] * 400)] * 8

    def post(_):
        with httpx.Client(base_url=only.base_url, timeout=120) as c:
            return c.post("/embedding", json={"content": texts})

    with ThreadPoolExecutor(12) as pool:
        statuses = [r.status_code for r in pool.map(post, range(12))]
    assert 200 in statuses and 503 in statuses
    assert set(statuses) <= {200, 503}


def test_the_token_table_rows_no_input_used_are_not_held(client, only):
    """The encoder's file pages are dropped after the load, as the chat model's: a BERT
    reads its token table by row, so the rows of tokens never sent stay out (most of
    all-minilm-l6-v2's 46 MiB file is that 30,522-row table)."""
    assert client.post("/embedding", json={"content": "hello world"}).status_code == 200
    path = dropped_model_path(only.process.pid, only.log())
    size_kib = Path(path).stat().st_size // 1024
    assert 0 < model_file_kib(only.process.pid, path) <= size_kib // 2
