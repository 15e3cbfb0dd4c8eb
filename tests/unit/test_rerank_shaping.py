"""The rerank answers' shapes: Jina/Cohere envelope and TEI array, sorted best first,
top_n, documents and texts echoed on request; the request checks; the pair tokens a
cross-encoder reads."""

from __future__ import annotations

import pytest

from mlxcel.api.rerank.shaping import jina_envelope, ranked, sigmoid, tei_array
from mlxcel.api.rerank.wire import RerankRequest
from mlxcel.engine.rerank_prompt import PairFormat, pair_tokens
from mlxcel.turn.errors import InvalidRequest

SCORES = [0.1, 2.5, -1.0, 2.5, 0.7]
DOCS = ["a", "b", "c", "d", "e"]


def test_ranked_sorts_descending_and_keeps_ties_in_request_order():
    assert [r.index for r in ranked(SCORES, None)] == [1, 3, 4, 0, 2]


@pytest.mark.parametrize("top_n, expected", [(0, []), (2, [1, 3]), (5, [1, 3, 4, 0, 2]), (99, [1, 3, 4, 0, 2])])
def test_top_n_keeps_the_best(top_n, expected):
    assert [r.index for r in ranked(SCORES, top_n)] == expected


def test_jina_envelope_without_documents():
    body = jina_envelope("xenc", SCORES, DOCS, 2, False, 42)
    assert body == {"model": "xenc", "object": "list", "usage": {"prompt_tokens": 42, "total_tokens": 42},
                    "results": [{"index": 1, "relevance_score": 2.5}, {"index": 3, "relevance_score": 2.5}]}


def test_jina_envelope_returns_documents_when_asked():
    results = jina_envelope("xenc", SCORES, DOCS, None, True, 1)["results"]
    assert [r["document"] for r in results] == [{"text": DOCS[r["index"]]} for r in results]
    assert [r["index"] for r in results] == [1, 3, 4, 0, 2]


def test_tei_array_is_bare_with_scores_and_optional_text():
    assert tei_array(SCORES, DOCS, 3, False, False) == [
        {"index": 1, "score": 2.5}, {"index": 3, "score": 2.5}, {"index": 4, "score": 0.7}]
    with_text = tei_array(SCORES, DOCS, None, True, False)
    assert [e["text"] for e in with_text] == ["b", "d", "e", "a", "c"]


def test_tei_activation_is_a_sigmoid_that_keeps_the_order():
    answer = tei_array(SCORES, DOCS, None, False, True)
    assert [e["index"] for e in answer] == [1, 3, 4, 0, 2]
    assert answer[0]["score"] == pytest.approx(1 / (1 + 2.718281828459045 ** -2.5))
    assert sigmoid(-800.0) == pytest.approx(0.0) and sigmoid(800.0) == 1.0  # no overflow


def _request(**fields) -> RerankRequest:
    return RerankRequest.model_validate(fields)


@pytest.mark.parametrize("fields, message", [
    ({"documents": ["a"]}, '"query" must be provided'),
    ({"query": 3, "documents": ["a"]}, '"query" must be a string'),
    ({"query": "q"}, '"documents" must be a non-empty string array'),
    ({"query": "q", "documents": []}, '"documents" must be a non-empty string array'),
    ({"query": "q", "documents": "a"}, '"documents" must be a non-empty string array'),
    ({"query": "q", "documents": ["a", 1]}, "documents[1] is not a string"),
    ({"query": "q", "texts": []}, '"texts" must be a non-empty string array'),
])
def test_bad_requests_name_the_field(fields, message):
    body = _request(**fields)
    with pytest.raises(InvalidRequest, match=message.replace("[", r"\[").replace("]", r"\]")):
        body.checked_query()
        body.checked_documents()


@pytest.mark.parametrize("top_n", [-1, 1.5, "2", True])
def test_top_n_must_be_a_non_negative_integer(top_n):
    with pytest.raises(InvalidRequest, match="top_n"):
        _request(query="q", documents=["a"], top_n=top_n).checked_top_n()


def test_documents_may_be_objects_with_text_and_texts_mean_tei():
    body = _request(query="q", documents=[{"text": "x"}, "y"])
    assert body.checked_documents() == ["x", "y"] and not body.is_tei
    tei = _request(query="q", texts=["x"], raw_scores=False)
    assert tei.is_tei and tei.checked_documents() == ["x"] and tei.activates_scores()
    assert not _request(query="q", texts=["x"]).activates_scores()  # absent: raw, as llama-server
    with pytest.raises(InvalidRequest, match="return_documents"):
        _request(query="q", documents=["x"], return_documents="yes").flag("return_documents")


def _words(text: str, add_special: bool, parse_special: bool) -> list[int]:
    return [len(w) for w in text.split()]


BERT = PairFormat(template=None, bos=101, eos=102, sep=102, add_bos=True, add_eos=True, add_sep=False)


def test_bert_pair_is_cls_query_sep_document_sep():
    assert pair_tokens(BERT, _words, "ab cde", "f") == [101, 2, 3, 102, 1, 102]


def test_roberta_style_pair_adds_a_second_separator():
    fmt = PairFormat(template=None, bos=0, eos=2, sep=2, add_bos=True, add_eos=True, add_sep=True)
    assert pair_tokens(fmt, _words, "ab", "c") == [0, 2, 2, 2, 1, 2]


def test_rerank_template_is_filled_and_tokenized_with_special_parsing():
    seen = []

    def tokenize(text, add_special, parse_special):
        seen.append((text, add_special, parse_special))
        return [7]

    fmt = PairFormat(template="<q>{query}</q><d>{document}</d>", bos=1, eos=2, sep=3,
                     add_bos=True, add_eos=True, add_sep=True)
    assert pair_tokens(fmt, tokenize, "Q", "D") == [7]
    assert seen == [("<q>Q</q><d>D</d>", False, True)]
