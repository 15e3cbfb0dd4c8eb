"""llama-server's own form: `--reranking -m CROSS_ENCODER` serves that model as a
reranker only: the rerank routes score with it, the generation routes answer as
llama-server does without a generating context, /health, /v1/models and /props
describe the reranker."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.fixtures.rerank_model import write_rerank_model
from tests.server_process import ServerProcess

QUERY = "where is the dog"
DOCS = ["a dog in the park", "the sun in the sky", "dogs ran"]


@pytest.fixture(scope="module")
def only(tmp_path_factory):
    path = write_rerank_model(tmp_path_factory.mktemp("xenc") / "xenc.gguf")
    proc = ServerProcess("--reranking", "--queue-cap", "0", "-a", "my-reranker", "--metrics",
                         "--slot-save-path", str(tmp_path_factory.mktemp("slots")), model=str(path))
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture
def client(only):
    with only.client() as c:
        yield c


def test_metrics_count_what_the_reranker_scored(client):
    def requests() -> float:
        text = client.get("/metrics").text
        return float(re.search(r"^mlxcel_rerank_requests_total (\S+)$", text, re.M).group(1))

    before = requests()
    assert client.post("/v1/rerank", json={"query": QUERY, "documents": DOCS}).status_code == 200
    assert requests() == before + 1
    assert client.get("/props").json()["endpoint_metrics"] is True


def test_reranks_with_the_served_model(client):
    r = client.post("/v1/rerank", json={"query": QUERY, "documents": DOCS, "top_n": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "my-reranker" and len(body["results"]) == 2
    tei = client.post("/rerank", json={"query": QUERY, "texts": DOCS}).json()
    assert {e["index"]: e["score"] for e in tei} == pytest.approx(
        {e["index"]: e["relevance_score"] for e in client.post("/reranking", json={"query": QUERY, "documents": DOCS}).json()["results"]},
        abs=1e-6)


def test_generation_routes_answer_as_llama_server_does_in_reranking_mode(client):
    r = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 500, r.text
    assert r.json()["error"]["message"] == "the current context does not support logits computation. skipping"


def test_slot_routes_say_there_are_no_generation_slots(client):
    assert client.get("/slots").json() == []
    for action in ("save", "erase"):
        r = client.post(f"/slots/0?action={action}", json={"filename": "a.bin"})
        assert r.status_code == 400 and "no generation slots" in r.json()["error"]["message"], r.text


def test_tokenize_uses_the_reranker_s_vocabulary(client):
    tokens = client.post("/tokenize", json={"content": QUERY}).json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert client.post("/detokenize", json={"tokens": tokens}).json()["content"].strip() == QUERY


def test_health_models_and_props_describe_the_reranker(client):
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["model"] == "my-reranker"
    models = client.get("/v1/models").json()
    assert [(m["id"], m["kind"]) for m in models["data"]] == [("my-reranker", "rerank")]
    props = client.get("/props").json()
    assert props["model_alias"] == "my-reranker" and props["rerank"]["scoring"] == "rank"


def test_past_the_queue_cap_requests_get_503(only):
    documents = [" ".join(["the cat sat on the mat"] * 30)] * 40

    def post(_):
        with httpx.Client(base_url=only.base_url, timeout=120) as c:
            return c.post("/v1/rerank", json={"query": QUERY, "documents": documents})

    with ThreadPoolExecutor(12) as pool:
        statuses = [r.status_code for r in pool.map(post, range(12))]
    assert 200 in statuses and 503 in statuses
    assert set(statuses) <= {200, 503}


def test_with_an_embedding_model_beside_the_reranker_still_describes_and_tokenizes(only, tmp_path):
    """`--reranking` with `--embedding-model`: /health, /props and /tokenize are the served
    reranker's (they were the embedding model's), and /v1/embeddings embeds beside it."""
    from tests.e2e.test_embeddings import EMBEDDING_MODEL
    path = write_rerank_model(tmp_path / "xenc.gguf")
    proc = ServerProcess("--reranking", "-a", "my-reranker", "--embedding-model", EMBEDDING_MODEL, model=str(path))
    try:
        proc.wait_ready()
        with proc.client() as client:
            health, props = client.get("/health"), client.get("/props").json()
            tokens = client.post("/tokenize", json={"content": QUERY}).json()["tokens"]
            embedded = client.post("/v1/embeddings", json={"input": QUERY})
    finally:
        proc.stop()
    with only.client() as client:
        served_tokens = client.post("/tokenize", json={"content": QUERY}).json()["tokens"]
    assert health.status_code == 200 and health.json()["model"] == "my-reranker"
    assert props["model_alias"] == "my-reranker"
    assert tokens == served_tokens
    assert embedded.status_code == 200 and len(embedded.json()["data"][0]["embedding"]) == 384
