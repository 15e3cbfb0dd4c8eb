"""The reranker: a model loaded beside the chat model (--rerank-model), or as the
whole server (--reranking), that scores documents against a query.

A cross-encoder (a GGUF whose pooling is rank) reads each (query, document) pair and
its classification head gives the score, as llama-server computes it. Any other
embedding model scores by the cosine similarity of the query's and each document's
pooled vectors. Either way the inputs of one request are one job of the embedding
engine, batched with the other jobs' inputs into shared decodes.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlxcel.config import ServerConfig
from mlxcel.engine.embedding_engine import EmbeddingEngine
from mlxcel.engine.embedding_runtime import EmbeddingRuntime
from mlxcel.engine.request import Priority
from mlxcel.engine.rerank_prompt import PairFormat, pair_tokens
from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.models.catalog import CATALOG
from mlxcel.turn.embedding_jobs import embedding_runtime_config, require_running, run_embedding_job
from mlxcel.turn.errors import ContextOverflow
from mlxcel.turn.worker_sleep import SleepingWorker

log = logging.getLogger("mlxcel.rerank")


class RerankScoring(str, enum.Enum):
    RANK = "rank"  # a cross-encoder's classification head
    COSINE = "cosine"  # an embedding model: cosine similarity of query and document


@dataclass(frozen=True)
class RerankScores:
    scores: list[float]  # one per document, in the request's order
    n_tokens: int  # tokens evaluated


class RerankHost(SleepingWorker):
    kind = noun = loader = "rerank"

    def __init__(self, config: ServerConfig, source: str, model_id: str | None = None,
                 force_rank: bool = False) -> None:
        self.config = config
        self.source = source
        self.force_rank = force_rank  # llama-server's --reranking: pooling rank whatever the GGUF says
        self.model_id = model_id or (source if source in CATALOG else Path(source).name)
        self.model_path: Path | None = None
        self.runtime: EmbeddingRuntime | None = None
        self.tokenizer: Tokenizer | None = None
        self.engine: EmbeddingEngine | None = None
        self.pair_format: PairFormat | None = None
        self.scoring: RerankScoring | None = None
        self.error: str | None = None
        self._init_sleep()
        self.created = int(time.time())
        self._ready = threading.Event()

    # -- loading ----------------------------------------------------------------------

    def _runtime(self, path: Path, pooling: str) -> EmbeddingRuntime:
        return EmbeddingRuntime(embedding_runtime_config(self.config, path, pooling))

    def _load(self) -> None:  # SleepingModel: on the loader thread
        from mlxcel.models.pull import resolve_model

        self.model_path = resolve_model(self.source, log=lambda line: log.info("%s", line))
        runtime = self._runtime(self.model_path, "rank" if self.force_rank else "unspecified")
        if runtime.pooling == "none":  # no pooled vector to compare: mean pooling, as for embeddings
            runtime.close()
            runtime = self._runtime(self.model_path, "mean")
        self.tokenizer = Tokenizer(runtime.vocab)
        self.pair_format = PairFormat.of_model(runtime.model)
        self.scoring = RerankScoring.RANK if runtime.pooling == "rank" else RerankScoring.COSINE
        engine = EmbeddingEngine(runtime, self.config.queue_cap)
        engine.start()
        self.runtime, self.engine = runtime, engine
        self._ready.set()
        log.info("rerank model %s loaded: %s scoring, %d tokens per input at most", self.model_id,
                 self.scoring.value, runtime.max_input_tokens)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def require_ready(self) -> EmbeddingEngine:
        self._check_ready()
        return require_running(self.engine, "rerank")

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.stop()

    def _unready(self) -> None:  # SleepingWorker
        self._ready.clear()

    # -- scoring ----------------------------------------------------------------------

    def inputs(self, query: str, documents: list[str], truncate: bool) -> list[list[int]]:
        """The token lists to encode: one pair per document (rank), or the query then
        each document (cosine). Too long: cut when `truncate`, else a 400."""
        tokenizer = self.tokenizer
        if self.scoring is RerankScoring.RANK:
            def tokenize(text: str, add_special: bool, parse_special: bool) -> list[int]:
                return tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

            inputs = [pair_tokens(self.pair_format, tokenize, query, doc) for doc in documents]
        else:
            inputs = [tokenizer.encode(text, add_special=True, parse_special=False) for text in [query, *documents]]
        limit = self.runtime.max_input_tokens
        for n, tokens in enumerate(inputs):
            if len(tokens) > limit:
                if not truncate:
                    raise ContextOverflow(len(tokens), limit)
                inputs[n] = self._truncated(tokens, limit)
            elif not tokens:
                inputs[n] = [self.pair_format.bos if self.pair_format.bos >= 0 else 0]
        return inputs

    def _truncated(self, tokens: list[int], limit: int) -> list[int]:
        """The first `limit` tokens, ending with the input's closing separator if it had one."""
        fmt = self.pair_format
        if tokens[-1] in (fmt.eos, fmt.sep) and limit > 1:
            return tokens[:limit - 1] + [tokens[-1]]
        return tokens[:limit]

    async def score(self, query: str, documents: list[str], priority: Priority, truncate: bool) -> RerankScores:
        """The documents' scores; cancelled (the client left), the inputs not yet
        decoded are dropped."""
        engine = self.require_ready()
        inputs = await asyncio.to_thread(self.inputs, query, documents, truncate)
        rows = await run_embedding_job(engine, inputs, priority)
        n_tokens = sum(map(len, inputs))
        if self.scoring is RerankScoring.RANK:
            return RerankScores([float(row[0]) for row in rows], n_tokens)
        return RerankScores(cosine_scores(rows[0], rows[1:]), n_tokens)


def cosine_scores(query: np.ndarray, documents: list[np.ndarray]) -> list[float]:
    q = query / (np.linalg.norm(query) or 1.0)
    return [float(np.dot(q, d / (np.linalg.norm(d) or 1.0))) for d in documents]


def rerank_host_for(config: ServerConfig, chat_model_id: str) -> RerankHost | None:
    """The reranker the command line asks for: -m itself with --reranking (under the
    model's id), the --rerank-model beside the chat model, or none."""
    if config.rerank_only:
        return RerankHost(config, config.model, chat_model_id, force_rank=True)
    if config.rerank_model:
        return RerankHost(config, config.rerank_model)
    return None
