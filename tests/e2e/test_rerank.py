"""Reranking with a cross-encoder: the test's tiny BERT reranker
(tests/fixtures/rerank_model.py) served beside the chat model with --rerank-model,
its scores checked against the reference llama-server started with --reranking on
the same file; the answer shapes, top_n, errors, batching and listings.

Both servers run with flash attention off: llama.cpp's CPU flash attention gives a
score that moves by ~1e-4 with how many sequences share the decode (llama-server's
own scores change with -np), while without it a pair scores the same, to ~1e-6, in
any batch; so the two servers' scores must agree to 1e-4 whatever each batched."""

from __future__ import annotations

import concurrent.futures

import pytest

from tests.fixtures.rerank_model import write_rerank_model
from tests.reference_server import BUILD_HINT, ReferenceServer, reference_binary
from tests.server_process import ServerProcess

QUERY = "what is the capital of france"
DOCS = [
    "paris is the capital of france",
    "the cat sat on the mat",
    "python is a program language",
    "berlin is a city in germany",
    "rain and snow and cold weather",
]
ROUTES = ["/v1/rerank", "/v1/reranking", "/rerank", "/reranking"]


@pytest.fixture(scope="module")
def xenc(tmp_path_factory):
    return write_rerank_model(tmp_path_factory.mktemp("xenc") / "tiny-xenc.gguf")


@pytest.fixture(scope="module")
def ours(xenc):
    proc = ServerProcess("-c", "1024", "-np", "1", "--rerank-model", str(xenc), "--queue-cap", "4", "-fa", "off")
    try:
        proc.wait_ready()
        with proc.client() as client:
            yield client
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def reference(xenc):
    binary = reference_binary()
    if binary is None:
        pytest.skip(f"the reference llama-server is not built: {BUILD_HINT}")
    proc = ReferenceServer(binary, str(xenc), "--reranking", "-fa", "off")
    try:
        proc.wait_ready()
        with proc.client() as client:
            yield client
    finally:
        proc.stop()


def _by_index(results: list[dict], field: str) -> dict[int, float]:
    return {r["index"]: r[field] for r in results}


def test_scores_equal_llama_servers(ours, reference):
    body = {"query": QUERY, "documents": DOCS}
    mine, theirs = ours.post("/v1/rerank", json=body), reference.post("/v1/rerank", json=body)
    assert mine.status_code == theirs.status_code == 200, (mine.text, theirs.text)
    a, b = _by_index(mine.json()["results"], "relevance_score"), _by_index(theirs.json()["results"], "relevance_score")
    assert a.keys() == b.keys() == set(range(len(DOCS)))
    for index in a:
        assert a[index] == pytest.approx(b[index], abs=1e-4), (index, a, b)
    assert [r["index"] for r in mine.json()["results"]] == [r["index"] for r in theirs.json()["results"]]
    assert mine.json()["usage"] == theirs.json()["usage"]  # the same tokens per pair


def test_tei_scores_equal_llama_servers(ours, reference):
    body = {"query": "a dog ran in the park", "texts": ["dogs ran", "the sun", "a dog in a park", "coffee"]}
    mine, theirs = ours.post("/rerank", json=body).json(), reference.post("/rerank", json=body).json()
    assert isinstance(mine, list) and set(mine[0]) == {"index", "score"}
    a, b = _by_index(mine, "score"), _by_index(theirs, "score")
    assert a == pytest.approx(b, abs=1e-4)


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_answers_the_envelope_best_first(ours, route):
    response = ours.post(route, json={"query": QUERY, "documents": DOCS, "top_n": 3, "return_documents": True})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list" and body["model"] == "tiny-xenc.gguf"
    results = body["results"]
    assert len(results) == 3
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)
    assert all(r["document"] == {"text": DOCS[r["index"]]} for r in results)
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 0


def test_documents_absent_unless_asked_and_top_n_zero(ours):
    results = ours.post("/v1/rerank", json={"query": QUERY, "documents": DOCS}).json()["results"]
    assert len(results) == len(DOCS) and all("document" not in r for r in results)
    assert ours.post("/v1/rerank", json={"query": QUERY, "documents": DOCS, "top_n": 0}).json()["results"] == []


def test_tei_return_text_and_activated_scores(ours):
    body = {"query": QUERY, "texts": DOCS, "return_text": True}
    raw = ours.post("/rerank", json=body).json()
    assert [e["text"] for e in raw] == [DOCS[e["index"]] for e in raw]
    activated = ours.post("/rerank", json={**body, "raw_scores": False}).json()
    assert [e["index"] for e in activated] == [e["index"] for e in raw]
    assert all(0.0 < e["score"] < 1.0 for e in activated)
    assert ours.post("/rerank", json={**body, "raw_scores": True}).json() == raw


def test_scores_do_not_depend_on_what_is_batched_with_them(ours):
    alone = {d: ours.post("/v1/rerank", json={"query": QUERY, "documents": [d]}).json()["results"][0]
             ["relevance_score"] for d in DOCS}

    def one(doc):
        body = {"query": QUERY, "documents": [doc, *DOCS], "return_documents": True}
        return ours.post("/v1/rerank", json=body).json()["results"]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(one, DOCS))
    for answer in answers:
        assert len(answer) == len(DOCS) + 1
        for r in answer:
            assert r["relevance_score"] == pytest.approx(alone[r["document"]["text"]], abs=1e-4)


@pytest.mark.parametrize("body, message", [
    ({"documents": DOCS}, '"query" must be provided'),
    ({"query": 1, "documents": DOCS}, '"query" must be a string'),
    ({"query": QUERY, "documents": []}, '"documents" must be a non-empty string array'),
    ({"query": QUERY, "documents": ["ok", 2]}, '"documents" must be a non-empty string array'),
    ({"query": QUERY, "documents": DOCS, "top_n": -1}, '"top_n" must be a non-negative integer'),
])
def test_bad_requests_are_400s_in_the_error_format(ours, body, message):
    response = ours.post("/v1/rerank", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and message in error["message"]


def test_too_long_input_names_both_counts_or_is_truncated(ours):
    long_doc = " ".join(["the cat sat on the mat"] * 60)  # 360 words; the model reads 256 positions
    response = ours.post("/v1/rerank", json={"query": QUERY, "documents": ["paris", long_doc]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "exceed_context_size_error" and error["n_ctx"] == 256 and error["n_prompt_tokens"] > 256
    cut = ours.post("/rerank", json={"query": QUERY, "texts": ["paris", long_doc], "truncate": True})
    assert cut.status_code == 200 and len(cut.json()) == 2


def test_listed_in_models_and_props_with_its_scoring(ours):
    entries = {m["id"]: m for m in ours.get("/v1/models").json()["data"]}
    assert entries["tiny-xenc.gguf"]["kind"] == "rerank" and entries["tiny-xenc.gguf"]["scoring"] == "rank"
    before = ours.get("/props").json()["rerank"]
    assert ours.post("/v1/rerank", json={"query": QUERY, "documents": DOCS}).status_code == 200
    rerank = ours.get("/props").json()["rerank"]
    assert rerank["model"] == "tiny-xenc.gguf" and rerank["scoring"] == "rank" and rerank["ready"]
    assert rerank["n_pairs"] == before["n_pairs"] + len(DOCS) and rerank["n_decodes"] > before["n_decodes"]


def test_a_client_that_leaves_drops_its_pairs_not_yet_scored(ours):
    """2,000 pairs take seconds here; a client that gives up after half a second cancels
    the rest: the pairs' count stops growing, and the next request is answered at once."""
    import time

    import httpx

    def scored() -> int:
        return ours.get("/props").json()["rerank"]["n_pairs"]

    before = scored()
    documents = [" ".join(["word"] * 60) + f" {i}" for i in range(2000)]
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{ours.base_url}/v1/rerank", json={"query": QUERY, "documents": documents}, timeout=0.5)
    time.sleep(1.0)
    settled = scored()
    started = time.monotonic()
    after = ours.post("/v1/rerank", json={"query": QUERY, "documents": ["paris"]})
    answered_in = time.monotonic() - started
    time.sleep(0.5)
    assert after.status_code == 200, after.text
    assert answered_in < 5
    assert settled - before < 1500  # most never ran
    assert scored() == settled + 1  # nothing of the abandoned request ran after it was cancelled


def test_chat_still_works_beside_the_reranker(ours):
    response = ours.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                       "max_tokens": 4})
    assert response.status_code == 200, response.text


def test_a_server_without_a_reranker_answers_501(http):
    response = http.post("/v1/rerank", json={"query": QUERY, "documents": DOCS})
    assert response.status_code == 501
    assert response.json()["error"]["type"] == "not_supported_error"
    assert "--reranking" in response.json()["error"]["message"]
