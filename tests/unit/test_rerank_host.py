"""The reranker's scoring over the embedding engine, with a fake runtime: a
cross-encoder's score is its head's first output per pair, an embedding model's is
the cosine of query and document vectors; inputs too long are refused or cut; a full
queue is a 503."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from mlxcel.config import ServerConfig
from mlxcel.engine.embedding_engine import EmbeddingEngine
from mlxcel.engine.request import Priority
from mlxcel.engine.rerank_prompt import PairFormat
from mlxcel.turn.errors import ContextOverflow, EngineUnavailable, GenerationFailed, ServerBusy
from mlxcel.turn.rerank_host import RerankHost, RerankScoring, cosine_scores

BOS, EOS = 1, 2
FORMAT = PairFormat(template=None, bos=BOS, eos=EOS, sep=EOS, add_bos=True, add_eos=True, add_sep=False)


class WordTokenizer:
    """One token per word: the word's length + 10; add_special wraps in BOS/EOS."""

    def encode(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        tokens = [len(word) + 10 for word in text.split()]
        return [BOS, *tokens, EOS] if add_special else tokens


class FakeRuntime:
    """Rank: [sum of tokens]; cosine: a 2-vector that points by the token sum."""

    n_ubatch, n_seq_max, max_input_tokens = 64, 8, 8

    def __init__(self, pooling: str) -> None:
        self.pooling = pooling
        self.batches: list[list[list[int]]] = []

    gate: threading.Event | None = None
    broken: str | None = None  # every decode raises this

    def embed(self, inputs):
        if self.gate is not None:
            self.gate.wait(5)
        if self.broken is not None:
            raise RuntimeError(self.broken)
        self.batches.append(inputs)
        if self.pooling == "rank":
            return [np.array([float(sum(tokens))], dtype=np.float32) for tokens in inputs]
        return [np.array([1.0, sum(tokens) / 100.0], dtype=np.float32) for tokens in inputs]


def _host(pooling: str, queue_cap: int = 8) -> tuple[RerankHost, FakeRuntime, EmbeddingEngine]:
    host = RerankHost(ServerConfig(model="unused"), "x.gguf")
    runtime = FakeRuntime(pooling)
    engine = EmbeddingEngine(runtime, queue_cap)
    host.runtime, host.engine, host.tokenizer, host.pair_format = runtime, engine, WordTokenizer(), FORMAT
    host.scoring = RerankScoring.RANK if pooling == "rank" else RerankScoring.COSINE
    host._ready.set()
    return host, runtime, engine


def test_rank_scores_are_the_heads_output_for_each_pair():
    host, runtime, engine = _host("rank")
    engine.start()
    try:
        result = asyncio.run(host.score("ab c", ["d", "efg"], Priority.NORMAL, truncate=False))
    finally:
        engine.stop()
    assert runtime.batches == [[[BOS, 12, 11, EOS, 11, EOS], [BOS, 12, 11, EOS, 13, EOS]]]  # one decode
    assert result.scores == [sum([BOS, 12, 11, EOS, 11, EOS]), sum([BOS, 12, 11, EOS, 13, EOS])]
    assert result.n_tokens == 12


def test_cosine_scores_compare_query_and_documents():
    host, runtime, engine = _host("mean")
    engine.start()
    try:
        result = asyncio.run(host.score("q", ["a", "abcd"], Priority.HIGH, truncate=False))
    finally:
        engine.stop()
    assert runtime.batches == [[[BOS, 11, EOS], [BOS, 11, EOS], [BOS, 14, EOS]]]
    assert result.scores[0] == pytest.approx(1.0) and result.scores[1] < 1.0


def test_cosine_scores_of_zero_vectors_are_zero():
    assert cosine_scores(np.zeros(3), [np.ones(3), np.zeros(3)]) == [0.0, 0.0]


def test_too_long_is_refused_or_cut_keeping_the_closing_separator():
    host, _, _ = _host("rank")
    long_doc = "a b c d e f g"
    with pytest.raises(ContextOverflow) as caught:
        host.inputs("q", [long_doc], truncate=False)
    assert caught.value.extra == {"n_prompt_tokens": 11, "n_ctx": 8}
    [cut] = host.inputs("q", [long_doc], truncate=True)
    assert len(cut) == 8 and cut[0] == BOS and cut[-1] == EOS


def test_a_full_queue_is_server_busy():
    host, _, engine = _host("rank", queue_cap=-1)  # no room at all
    engine.start()
    try:
        with pytest.raises(ServerBusy):
            asyncio.run(host.score("q", ["a"], Priority.NORMAL, truncate=False))
    finally:
        engine.stop()


def test_a_cancelled_request_drops_its_pairs_not_yet_decoded():
    host, runtime, engine = _host("rank")
    runtime.gate = threading.Event()
    engine.start()

    async def scenario():
        first = asyncio.ensure_future(host.score("q", ["a"], Priority.NORMAL, truncate=False))
        await asyncio.sleep(0.05)  # the first decode is running, held at the gate
        second = asyncio.ensure_future(host.score("q", ["bb", "ccc"], Priority.NORMAL, truncate=False))
        await asyncio.sleep(0.05)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        runtime.gate.set()
        return await first

    try:
        result = asyncio.run(scenario())
        engine.stop()
    finally:
        runtime.gate.set()
    assert len(result.scores) == 1
    assert runtime.batches == [[[BOS, 11, EOS, 11, EOS]]]  # the cancelled request's pairs never ran


def test_a_failed_forward_pass_fails_that_request_and_the_engine_goes_on():
    host, runtime, engine = _host("rank")
    engine.start()
    try:
        runtime.broken = "the head read NaN"
        with pytest.raises(GenerationFailed, match="the head read NaN"):
            asyncio.run(host.score("q", ["a"], Priority.NORMAL, truncate=False))
        runtime.broken = None
        result = asyncio.run(host.score("q", ["a"], Priority.NORMAL, truncate=False))
    finally:
        engine.stop()
    assert result.scores == [sum([BOS, 11, EOS, 11, EOS])]


def test_a_stopped_engine_is_unavailable_before_any_work():
    host, runtime, engine = _host("rank")
    engine.start()
    engine.stop()
    with pytest.raises(EngineUnavailable, match="rerank engine stopped"):
        asyncio.run(host.score("q", ["a"], Priority.NORMAL, truncate=False))
    assert runtime.batches == []
