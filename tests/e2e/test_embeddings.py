"""Embeddings served beside the chat model (--embedding-model all-minilm-l6-v2):
OpenAI's /v1/embeddings through the official SDK, llama-server's native /embedding
and /embeddings, batching of one request's inputs and of concurrent requests,
normalisations, token inputs, truncation and the over-long 400, and vectors that
match a plain numpy BERT over the original checkpoint."""

from __future__ import annotations

import base64
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from mlxcel.engine.embedding_engine import STEP_TOKENS
from tests.health_probe import health_latencies_while
from tests.server_process import ServerProcess

EMBEDDING_MODEL = os.environ.get("MLXCEL_TEST_EMBEDDING_MODEL", "all-minilm-l6-v2")
EMBEDDING_ID = Path(EMBEDDING_MODEL).name  # a catalog name, or a file's name
SENTENCES = ["The cat sits on the mat.", "A dog runs in the park.", "Stock markets fell sharply today.",
             "Quantum computers use qubits.", "I love pizza with extra cheese."]


@pytest.fixture(scope="module")
def beside():
    proc = ServerProcess("-c", "2048", "-np", "2", "--embedding-model", EMBEDDING_MODEL)
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture
def client(beside):
    with beside.client() as c:
        yield c


def _sdk(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.base_url}/v1", api_key="unused", max_retries=0, timeout=120)


def _vectors(client, inputs, **fields) -> np.ndarray:
    r = client.post("/v1/embeddings", json={"input": inputs, "encoding_format": "float", **fields})
    assert r.status_code == 200, r.text
    return np.array([d["embedding"] for d in r.json()["data"]], dtype=np.float32)


def _cos(a, b) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_openai_sdk_embeddings_create(beside):
    sdk = _sdk(beside)
    reply = sdk.embeddings.create(model=EMBEDDING_MODEL, input=SENTENCES)  # the SDK asks for base64 and decodes it
    assert reply.object == "list" and len(reply.data) == len(SENTENCES)
    assert [d.index for d in reply.data] == list(range(len(SENTENCES)))
    assert all(len(d.embedding) == 384 for d in reply.data)
    assert reply.usage.prompt_tokens == reply.usage.total_tokens > len(SENTENCES) * 4
    floats = sdk.embeddings.create(model=EMBEDDING_MODEL, input=SENTENCES, encoding_format="float")
    for a, b in zip(reply.data, floats.data):
        assert np.allclose(a.embedding, b.embedding, atol=1e-7)
        assert abs(np.linalg.norm(b.embedding) - 1.0) < 1e-4  # euclidean by default
    single = sdk.embeddings.create(model=EMBEDDING_MODEL, input=SENTENCES[0], encoding_format="float")
    assert len(single.data) == 1 and np.allclose(single.data[0].embedding, floats.data[0].embedding, atol=1e-5)


def test_meaning_is_in_the_vectors(client):
    cat, dog, market, _, _ = _vectors(client, SENTENCES)
    kitten = _vectors(client, "A kitten is sitting on a rug.")[0]
    assert _cos(kitten, cat) > _cos(kitten, market) + 0.2
    assert _cos(cat, dog) > _cos(cat, market)


def test_base64_holds_the_same_float32_vector(client):
    r = client.post("/v1/embeddings", json={"input": SENTENCES[:2], "encoding_format": "base64"})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data[0]["object"] == "embedding" and data[0]["encoding_format"] == "base64"
    decoded = np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in data])
    assert np.array_equal(decoded, _vectors(client, SENTENCES[:2]))


def test_64_inputs_in_one_request_are_batched_and_each_is_its_own(client, beside):
    texts = [f"Sentence number {i} is about {SENTENCES[i % 5].lower()}" for i in range(64)]
    before = client.get("/props").json()["embedding_model"]
    batch = _vectors(client, texts)
    after = client.get("/props").json()["embedding_model"]
    assert batch.shape == (64, 384)
    assert after["n_inputs"] - before["n_inputs"] == 64
    # many inputs per decode: at most ~20 tokens each, in decodes of the ubatch, or of
    # STEP_TOKENS while single-input requests (as this module sends) keep arriving
    step = min(STEP_TOKENS, after["n_ubatch"])
    assert after["n_decodes"] - before["n_decodes"] <= 64 * 20 // step + 2
    for i in (0, 17, 63):  # a vector does not depend on its batch neighbours
        assert _cos(batch[i], _vectors(client, texts[i])[0]) > 0.9999


def test_concurrent_requests_each_get_their_own_vectors(beside):
    texts = [f"{s} (variant {i})" for i in range(4) for s in SENTENCES]
    with beside.client() as c:
        alone = {t: _vectors(c, t)[0] for t in texts[:5]}

    def one(text):
        with beside.client() as c:
            return text, _vectors(c, [text])[0]

    with ThreadPoolExecutor(len(texts)) as pool:
        together = dict(pool.map(one, texts))
    for text, vector in alone.items():
        assert _cos(vector, together[text]) > 0.9999
    assert len({v.tobytes() for v in together.values()}) == len(texts)


def test_token_arrays_embed_as_their_text(client):
    text_vector = _vectors(client, "hello world")[0]
    ids = [101, 7592, 2088, 102]  # [CLS] hello world [SEP] in BERT's uncased vocabulary
    assert _cos(_vectors(client, ids)[0], text_vector) > 0.9999
    both = _vectors(client, [ids, ids[:2] + ids[3:]])
    assert both.shape == (2, 384) and _cos(both[0], text_vector) > 0.9999


def test_native_shape_and_normalisations(client):
    r = client.post("/embedding", json={"content": SENTENCES[0]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body, list) and body[0]["index"] == 0 and len(body[0]["embedding"]) == 1
    euclid = np.array(body[0]["embedding"][0])
    assert abs(np.linalg.norm(euclid) - 1) < 1e-4
    raw = np.array(client.post("/embeddings", json={"content": SENTENCES[0], "embd_normalize": -1}).json()[0]["embedding"][0])
    assert abs(np.linalg.norm(raw) - 1) > 1e-3 and _cos(raw, euclid) > 0.99999
    maxabs = np.array(client.post("/embedding", json={"input": SENTENCES[0], "embd_normalize": 0}).json()[0]["embedding"][0])
    assert abs(np.max(np.abs(maxabs)) - 32760) < 0.05
    taxicab = np.array(client.post("/embedding", json={"content": SENTENCES[0], "embd_normalize": 1}).json()[0]["embedding"][0])
    assert abs(np.sum(np.abs(taxicab)) - 1) < 1e-4
    p3 = np.array(client.post("/embedding", json={"content": SENTENCES[0], "embd_normalize": 3}).json()[0]["embedding"][0])
    assert abs(np.sum(np.abs(p3) ** 3) - 1) < 1e-4
    many = client.post("/embeddings", json={"content": SENTENCES[:3]}).json()
    assert [item["index"] for item in many] == [0, 1, 2]
    # `content` on the OpenAI path asks for the native shape, as llama-server answers
    assert isinstance(client.post("/v1/embeddings", json={"content": SENTENCES[0]}).json(), list)


def test_over_long_input_is_a_400_naming_both_counts_or_is_truncated(client):
    long_text = " ".join(["hello"] * 700)  # one token each, plus [CLS] and [SEP]
    r = client.post("/v1/embeddings", json={"input": ["short", long_text]})
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "exceed_context_size_error"
    assert error["n_prompt_tokens"] == 702 and error["n_ctx"] == 512
    assert "702" in error["message"] and "512" in error["message"]
    cut = client.post("/v1/embeddings", json={"input": [long_text], "truncate": True})
    assert cut.status_code == 200, cut.text
    assert cut.json()["usage"]["prompt_tokens"] == 512
    native = client.post("/embedding", json={"content": long_text, "truncate": True})
    assert native.status_code == 200


@pytest.mark.parametrize("body, status, fragment", [
    ({}, 400, '"input" or "content" must be provided'),
    ({"input": []}, 400, "must not be empty"),
    ({"input": "x", "encoding_format": "int8"}, 400, "float or base64"),
    ({"input": "x", "dimensions": 100}, 400, "384 dimensions"),
    ({"input": [[1, 99999999]]}, 400, "out of the vocabulary"),
    ({"input": [[]]}, 400, "cannot be empty"),
    ({"input": 5}, 400, "input"),
    ({"input": "x", "embd_normalize": -3}, 400, "embd_normalize"),
])
def test_bad_requests_are_4xx_in_the_error_format(client, body, status, fragment):
    r = client.post("/v1/embeddings", json=body)
    assert r.status_code == status, r.text
    assert fragment in r.json()["error"]["message"]


def test_dimensions_equal_to_the_model_are_accepted(client):
    r = client.post("/v1/embeddings", json={"input": "x", "dimensions": 384})
    assert r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 384


def test_models_and_props_list_the_embedding_model_with_its_kind(client):
    models = client.get("/v1/models").json()
    kinds = {entry["id"]: entry["kind"] for entry in models["data"]}
    assert kinds == {"smollm2-135m-instruct": "chat", EMBEDDING_ID: "embedding"}
    embedding = next(entry for entry in models["data"] if entry["kind"] == "embedding")
    assert embedding["meta"]["n_embd"] == 384 and embedding["meta"]["pooling"] == "mean"
    props = client.get("/props").json()["embedding_model"]
    assert (props["id"], props["pooling"], props["n_embd"], props["n_ctx"]) == (EMBEDDING_ID, "mean", 384, 512)
    r = client.post("/v1/embeddings", json={"input": "x", "model": "whatever-the-client-says"})
    assert r.json()["model"] == "whatever-the-client-says"  # echoed, as llama-server does
    assert client.post("/v1/embeddings", json={"input": "x"}).json()["model"] == EMBEDDING_ID


def test_chat_still_works_beside_the_embedding_worker(client):
    r = client.post("/completion", json={"prompt": "Hello", "n_predict": 4, "temperature": 0})
    assert r.status_code == 200 and r.json()["tokens_predicted"] == 4


def test_x_priority_is_accepted(client):
    r = client.post("/v1/embeddings", json={"input": "x"}, headers={"X-Priority": "high"})
    assert r.status_code == 200


@pytest.fixture(scope="module")
def reference():
    from tests.embedding_reference import BertReference
    from tests.fixtures.minilm import minilm_source

    return BertReference(minilm_source())


REFERENCE_SENTENCES = ["The quick brown fox jumps over the lazy dog.", "How do I reset my password?",
                       "Café déjà vu, naïve résumé (accents are stripped).",
                       "42 apples cost $3.50 in 2024; that's 8.3 cents each."]


def test_vectors_match_a_numpy_forward_pass_over_the_checkpoint(client, beside, reference):
    expected = reference.embed(REFERENCE_SENTENCES)
    batched = _vectors(client, REFERENCE_SENTENCES)
    sdk = _sdk(beside).embeddings.create(model=EMBEDDING_ID, input=REFERENCE_SENTENCES)
    native = client.post("/embedding", json={"content": REFERENCE_SENTENCES}).json()
    for i, want in enumerate(expected):
        assert _cos(batched[i], want) >= 0.999
        assert _cos(np.array(sdk.data[i].embedding), want) >= 0.999
        assert _cos(np.array(native[i]["embedding"][0]), want) >= 0.999


def test_a_client_that_leaves_drops_its_inputs_not_yet_embedded(client, beside):
    import time

    import httpx

    before = client.get("/props").json()["embedding_model"]["n_inputs"]
    long_inputs = [" ".join(["word"] * 400) + f" {i}" for i in range(256)]  # one input per decode
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{beside.base_url}/v1/embeddings", json={"input": long_inputs}, timeout=1.0)
    time.sleep(1.0)
    started = time.monotonic()
    assert client.post("/v1/embeddings", json={"input": "still here"}).status_code == 200
    assert time.monotonic() - started < 5
    done = client.get("/props").json()["embedding_model"]["n_inputs"] - before
    assert done < 256


@pytest.mark.parametrize("path, field", [("/v1/embeddings", "input"), ("/embeddings", "content")])
def test_health_answers_while_thousands_of_vectors_are_rendered(beside, path, field):
    """2,048 vectors of 384 floats take about 0.3 s to write out as JSON: a thread does
    it, not the event loop (/health stalled that long)."""
    def send() -> tuple[int, int]:
        with beside.client(timeout=300) as other:
            response = other.post(path, json={field: ["x"] * 2048})
            return response.status_code, len(response.content)

    latencies, [(status, size)] = health_latencies_while(beside, [send])
    assert status == 200 and size > 5_000_000, (status, size)
    assert max(latencies) < 0.1, f"slowest /health {max(latencies):.3f}s"
