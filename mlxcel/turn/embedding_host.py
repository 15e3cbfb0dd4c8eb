"""The embedding worker: an embedding model and its engine thread, loaded on a
background thread at start (beside the chat model, or alone with --embedding), and
how a request's inputs become token lists and come back as vectors."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlxcel.config import ServerConfig
from mlxcel.engine.embedding_engine import EmbeddingEngine
from mlxcel.engine.embedding_runtime import EmbeddingRuntime
from mlxcel.engine.request import Priority
from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.models.catalog import CATALOG
from mlxcel.turn.embedding_jobs import embedding_runtime_config, require_running, run_embedding_job
from mlxcel.turn.errors import ContextOverflow, InvalidRequest
from mlxcel.turn.worker_sleep import SleepingWorker

log = logging.getLogger("mlxcel.server")

EmbeddingInput = str | list[int]  # a text, or token ids used as they are


def model_id_of(name: str, alias: str | None = None) -> str:
    return alias or (name if name in CATALOG else Path(name).name)


@dataclass
class EmbeddingInputs:
    """A request's inputs as token lists, ready for the engine."""

    tokens: list[list[int]]

    @property
    def n_tokens(self) -> int:
        return sum(map(len, self.tokens))


class EmbeddingHost(SleepingWorker):
    kind = noun = loader = "embedding"

    def __init__(self, config: ServerConfig, model: str, model_id: str) -> None:
        self.config = config
        self.model = model
        self.model_id = model_id
        self.model_path: Path | None = None
        self.runtime: EmbeddingRuntime | None = None
        self.tokenizer: Tokenizer | None = None
        self.engine: EmbeddingEngine | None = None
        self.created = int(time.time())
        self.ready = False
        self.error: str | None = None
        self._init_sleep()

    # -- loading ----------------------------------------------------------------------------

    def _load(self) -> None:  # SleepingModel: on the loader thread
        from mlxcel.models.pull import resolve_model

        cfg = self.config
        started = time.monotonic()
        self.model_path = resolve_model(self.model, log=lambda line: log.info("%s", line))
        runtime = EmbeddingRuntime(embedding_runtime_config(cfg, self.model_path, cfg.pooling))
        tokenizer = Tokenizer(runtime.vocab)
        engine = EmbeddingEngine(runtime, cfg.queue_cap)
        engine.start()
        self.runtime, self.tokenizer, self.engine = runtime, tokenizer, engine
        self.ready = True
        log.info("embedding model %s loaded in %.1fs: pooling %s, %d dimensions, inputs up to %d tokens, "
                 "%d tokens and %d inputs per decode", self.model_id, time.monotonic() - started, runtime.pooling,
                 runtime.n_out, runtime.max_input_tokens, runtime.n_ubatch, runtime.n_seq_max)

    def require_ready(self) -> EmbeddingEngine:
        self._check_ready()
        return require_running(self.engine, "embedding")

    @property
    def pooling(self) -> str:
        return self.runtime.pooling if self.runtime is not None else self.config.pooling

    @property
    def dimensions(self) -> int:
        return self.runtime.n_out if self.runtime is not None else 0

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.stop()

    # -- inputs -------------------------------------------------------------------------------

    def tokenize(self, inputs: list[EmbeddingInput], truncate: bool) -> EmbeddingInputs:
        """Texts tokenized with the model's special tokens; token ids checked. An input
        longer than the model takes is a 400 naming both counts, or, with `truncate`,
        cut to fit (keeping a closing special token such as BERT's [SEP])."""
        tokenizer, limit = self.tokenizer, self.runtime.max_input_tokens
        out = []
        for item in inputs:
            if isinstance(item, str):
                tokens = tokenizer.encode(item, add_special=True, parse_special=True)
            else:
                tokens = list(item)
                bad = tokenizer.first_out_of_range(tokens)
                if bad is not None:
                    raise InvalidRequest(f"token id {bad} is out of the vocabulary (0..{tokenizer.n_vocab - 1})")
            if not tokens:
                raise InvalidRequest("Input content cannot be empty")
            if len(tokens) > limit:
                if not truncate:
                    raise ContextOverflow(len(tokens), limit)
                tokens = self._truncated(item, tokens, limit)
            out.append(tokens)
        return EmbeddingInputs(out)

    def _truncated(self, item: EmbeddingInput, tokens: list[int], limit: int) -> list[int]:
        if isinstance(item, str) and limit > 1:
            plain = self.tokenizer.encode(item, add_special=False, parse_special=True)
            if plain and tokens[-1] != plain[-1]:  # the tokenizer closes the input with a special token
                return tokens[: limit - 1] + tokens[-1:]
        return tokens[:limit]

    # -- running ------------------------------------------------------------------------------

    async def embed(self, inputs: EmbeddingInputs, priority: Priority) -> list[np.ndarray]:
        """The model's raw output for every input (pooled vector, rank scores, or one row
        per token), from the engine's next batches. Raises ServerBusy past the queue cap."""
        return await run_embedding_job(self.require_ready(), inputs.tokens, priority)
