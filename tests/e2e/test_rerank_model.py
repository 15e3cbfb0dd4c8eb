"""The test cross-encoder (tests/fixtures/rerank_model.py) is what llama.cpp loads as
a reranker: rank pooling, one classifier output, a score per (query, document) pair
that depends on the pair and not on what else shares the decode."""

from __future__ import annotations

import ctypes

import llama_cpp
import pytest

from mlxcel.engine.llama_runtime import _init_backend
from mlxcel.engine.rerank_prompt import PairFormat, pair_tokens
from tests.fixtures.rerank_model import CLS, SEP, write_rerank_model

QUERY = "what is the capital of france"
DOCS = ["paris is the capital of france", "the cat sat on the mat", "python code"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    _init_backend()
    path = write_rerank_model(tmp_path_factory.mktemp("xenc") / "xenc.gguf")
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), llama_cpp.llama_model_default_params())
    assert model, "llama.cpp could not load the cross-encoder"
    params = llama_cpp.llama_context_default_params()
    params.embeddings, params.pooling_type = True, llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED
    params.n_ctx = params.n_batch = params.n_ubatch = 512
    params.n_seq_max, params.n_threads, params.n_threads_batch = 4, 1, 1
    ctx = llama_cpp.llama_init_from_model(model, params)
    yield model, ctx
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)


def _tokenize(model):
    vocab = llama_cpp.llama_model_get_vocab(model)

    def tokenize(text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode()
        out = (llama_cpp.llama_token * 512)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), out, 512, add_special, parse_special)
        return list(out[:n])

    return tokenize


def _scores(ctx, inputs: list[list[int]]) -> list[float]:
    batch = llama_cpp.llama_batch_init(sum(map(len, inputs)), 0, len(inputs))
    i = 0
    for seq, tokens in enumerate(inputs):
        for pos, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, True
            batch.seq_id[i][0] = seq
            i += 1
    batch.n_tokens = i
    try:
        assert llama_cpp.llama_decode(ctx, batch) == 0
        return [llama_cpp.llama_get_embeddings_seq(ctx, seq)[0] for seq in range(len(inputs))]
    finally:
        llama_cpp.llama_batch_free(batch)


def test_llama_cpp_reads_a_rank_model_with_one_classifier_output(llama):
    model, ctx = llama
    assert llama_cpp.llama_pooling_type(ctx) == llama_cpp.LLAMA_POOLING_TYPE_RANK
    assert llama_cpp.llama_model_n_cls_out(model) == 1
    buf = ctypes.create_string_buffer(64)
    llama_cpp.llama_model_meta_val_str(model, b"general.architecture", buf, 64)
    assert buf.value == b"bert"


def test_pairs_are_cls_query_sep_document_sep(llama):
    model, _ = llama
    fmt = PairFormat.of_model(model)
    tokenize = _tokenize(model)
    tokens = pair_tokens(fmt, tokenize, "the cat", "a dog")
    assert tokens == [CLS, *tokenize("the cat", False, False), SEP, *tokenize("a dog", False, False), SEP]
    assert fmt.template is None


def test_scores_depend_on_the_pair_not_on_the_batch(llama):
    model, ctx = llama
    fmt, tokenize = PairFormat.of_model(model), _tokenize(model)
    inputs = [pair_tokens(fmt, tokenize, QUERY, doc) for doc in DOCS]
    together = _scores(ctx, inputs)
    alone = [_scores(ctx, [tokens])[0] for tokens in inputs]
    assert together == pytest.approx(alone, abs=1e-4)
    assert len({round(s, 3) for s in together}) == len(DOCS)  # the random head tells the documents apart
