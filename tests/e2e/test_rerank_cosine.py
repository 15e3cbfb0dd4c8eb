"""Reranking with an embedding model: all-MiniLM-L6-v2 as --rerank-model scores each
document by the cosine similarity of its embedding with the query's. The relevant
document of each query is unambiguous and must come first; the scores must be the
cosines of the numpy reference's embeddings (tests/embedding_reference.py)."""

from __future__ import annotations

import pytest

from tests.embedding_reference import BertReference
from tests.fixtures.minilm import NAME, minilm_gguf, minilm_source
from tests.server_process import ServerProcess

CASES = [
    ("What is the capital of France?", 1, [
        "Bananas are a good source of potassium.",
        "Paris is the capital and largest city of France.",
        "The Great Barrier Reef lies off the coast of Australia.",
        "Guido van Rossum created the Python programming language.",
    ]),
    ("How do I install a Python package?", 2, [
        "The Eiffel Tower was completed in 1889.",
        "Cats sleep for most of the day.",
        "Run pip install followed by the package name to install a Python package.",
    ]),
    ("Which animal barks?", 0, [
        "Dogs bark to warn their owners and to communicate.",
        "Photosynthesis turns sunlight into chemical energy in plants.",
        "The stock market fell sharply on Monday.",
    ]),
]


@pytest.fixture(scope="module")
def ours():
    minilm_gguf()  # pulled and converted before the server starts
    proc = ServerProcess("-c", "1024", "-np", "1", "--rerank-model", NAME)
    try:
        proc.wait_ready()
        with proc.client() as client:
            yield client
    finally:
        proc.stop()


@pytest.mark.parametrize("query, relevant, documents", CASES, ids=[c[0] for c in CASES])
def test_the_relevant_document_comes_first(ours, query, relevant, documents):
    response = ours.post("/v1/rerank", json={"query": query, "documents": documents})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == NAME
    results = body["results"]
    assert results[0]["index"] == relevant
    assert results[0]["relevance_score"] > results[1]["relevance_score"] + 0.1
    assert all(-1.0 <= r["relevance_score"] <= 1.0 for r in results)


def test_scores_are_the_cosines_of_the_reference_embeddings(ours):
    query, _, documents = CASES[0]
    reference = BertReference(minilm_source())
    vectors = reference.embed([query, *documents])
    expected = [float(vectors[0] @ row) for row in vectors[1:]]
    answer = ours.post("/rerank", json={"query": query, "texts": documents, "raw_scores": False}).json()
    got = {e["index"]: e["score"] for e in answer}  # cosine scores are never passed through a sigmoid
    assert [got[i] for i in range(len(documents))] == pytest.approx(expected, abs=2e-3)


def test_props_and_models_say_cosine(ours):
    assert ours.get("/props").json()["rerank"]["scoring"] == "cosine"
    entries = {m["id"]: m for m in ours.get("/v1/models").json()["data"]}
    assert entries[NAME]["kind"] == "rerank" and entries[NAME]["scoring"] == "cosine"
