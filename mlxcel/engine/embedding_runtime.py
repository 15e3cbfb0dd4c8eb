"""A llama.cpp context with embeddings on: one decode embeds many inputs at once.

Each input is its own sequence of one batch; every token is an output, as pooling
needs. After the decode the pooled vector of each sequence (or, with pooling none,
each token's vector) is copied out, and the memory is cleared for the next batch.
Only the embedding engine's thread calls `embed`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import numpy as np

from mlxcel.engine.batch import TokenBatch
from mlxcel.engine.llama_runtime import LOAD_MODES, ModelLoadError, _init_backend, _set, free_model, place_weights
from mlxcel.engine.weight_pages import MAPPINGS, release_after_load

log = logging.getLogger("mlxcel.llama")

LLAMA_MAX_SEQ = 256  # llama.cpp's most sequences in one context

POOLING = {
    "unspecified": llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED,
    "none": llama_cpp.LLAMA_POOLING_TYPE_NONE,
    "mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN,
    "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS,
    "last": llama_cpp.LLAMA_POOLING_TYPE_LAST,
    "rank": llama_cpp.LLAMA_POOLING_TYPE_RANK,
}
POOLING_NAMES = {value: name for name, value in POOLING.items()}


class EmbeddingDecodeError(RuntimeError):
    """llama_decode refused a batch of embedding inputs."""


@dataclass(frozen=True)
class EmbeddingRuntimeConfig:
    model_path: Path
    pooling: str = "unspecified"  # from the GGUF unless set
    n_ubatch: int = 512  # most tokens per decode; every input fits in one
    n_seq_max: int = 64  # most inputs per decode
    n_threads: int = 2
    n_threads_batch: int = 2
    flash_attn: int = llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
    n_gpu_layers: int = 0
    load_mode: str = "auto"  # llama.cpp's model loading, as LOAD_MODES names it (--load-mode)
    repack: bool | None = None  # --repack / --no-repack (weight_buffers.repack_weights)
    check_tensors: bool = False  # --check-tensors: llama.cpp validates the tensor data while loading


class EmbeddingRuntime:
    """Owns one llama_model and one embedding context."""

    def __init__(self, config: EmbeddingRuntimeConfig) -> None:
        _init_backend()
        self.config = config
        with MAPPINGS:  # one model's memory mapped or dropped at a time (weight_pages.py)
            self._open(config)

    def _open(self, config: EmbeddingRuntimeConfig) -> None:
        # the same checked setter as the chat runtime's (a field llama.cpp's struct lacks is an error)
        model_params = place_weights(_set(llama_cpp.llama_model_default_params(), n_gpu_layers=config.n_gpu_layers,
                                          load_mode=LOAD_MODES[config.load_mode], check_tensors=config.check_tensors),
                                     config.repack, Path(config.model_path))
        self.model = llama_cpp.llama_model_load_from_file(str(config.model_path).encode(), model_params)
        if not self.model:
            raise ModelLoadError(f"llama.cpp could not load {config.model_path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        release_after_load(config.model_path, config.load_mode)
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(self.model))
        n_seq = max(1, min(config.n_seq_max, LLAMA_MAX_SEQ, config.n_ubatch))
        params = _set(
            llama_cpp.llama_context_default_params(),
            # memory is cleared after every decode: it never holds more than one batch
            n_ctx=config.n_ubatch,
            n_batch=config.n_ubatch,  # non-causal models need n_batch == n_ubatch
            n_ubatch=config.n_ubatch,
            n_seq_max=n_seq,
            kv_unified=True,
            n_threads=config.n_threads,
            n_threads_batch=config.n_threads_batch,
            flash_attn_type=config.flash_attn,
            embeddings=True,
            pooling_type=POOLING[config.pooling],
            no_perf=True,
        )
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            raise ModelLoadError(f"llama.cpp could not create an embedding context (ubatch {config.n_ubatch})")
        self.memory = llama_cpp.llama_get_memory(self.ctx)  # None for encoder-only models such as BERT
        self.n_ubatch = int(llama_cpp.llama_n_ubatch(self.ctx))
        self.n_seq_max = int(llama_cpp.llama_n_seq_max(self.ctx))
        self.pooling = POOLING_NAMES.get(int(llama_cpp.llama_pooling_type(self.ctx)), "none")
        if self.pooling == "rank":
            self.n_out = max(1, int(llama_cpp.llama_model_n_cls_out(self.model)))
        else:
            self.n_out = int(llama_cpp.llama_model_n_embd_out(self.model))
        self._batch = TokenBatch(self.n_ubatch)

    @property
    def max_input_tokens(self) -> int:
        """The longest input: it must fit the model's trained context and one ubatch."""
        return min(self.n_ctx_train or self.n_ubatch, self.n_ubatch)

    def embed(self, inputs: list[list[int]]) -> list[np.ndarray]:
        """One decode of every input as its own sequence: for each input its pooled
        vector (n_out floats), or with pooling none an (n_tokens, n_out) matrix."""
        batch = self._batch
        batch.clear()
        spans = []
        for seq, tokens in enumerate(inputs):
            first = batch.size
            batch.add_span(tokens, 0, seq, logits_last=False)
            batch.wants_logits[first:batch.size] = 1
            spans.append((first, batch.size))
        try:
            rc = int(llama_cpp.llama_decode(self.ctx, batch.seal()))
            if rc != 0:
                raise EmbeddingDecodeError(f"llama_decode returned {rc} for {len(inputs)} inputs, {batch.size} tokens")
            return [self._read(seq, first, end) for seq, (first, end) in enumerate(spans)]
        finally:
            if self.memory:
                llama_cpp.llama_memory_clear(self.memory, True)

    def _read(self, seq: int, first: int, end: int) -> np.ndarray:
        if self.pooling == "none":
            rows = [self._row(llama_cpp.llama_get_embeddings_ith(self.ctx, i)) for i in range(first, end)]
            return np.stack(rows)
        return self._row(llama_cpp.llama_get_embeddings_seq(self.ctx, seq))

    def _row(self, pointer) -> np.ndarray:
        if not pointer:
            raise EmbeddingDecodeError("llama.cpp returned no embedding")
        return np.ctypeslib.as_array(pointer, shape=(self.n_out,)).astype(np.float32, copy=True)

    def close(self) -> None:
        free_model(self)
