"""llama.cpp's own embeddings of a GGUF, through llama-cpp-python's low-level API.

What the server should reproduce: one context with embeddings on, every text its own
sequence in one batch, ``llama_get_embeddings_seq`` per sequence. Test-side only.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp
import numpy as np

POOLING = {"mean": llama_cpp.LLAMA_POOLING_TYPE_MEAN, "cls": llama_cpp.LLAMA_POOLING_TYPE_CLS}


class LlamaEmbedder:
    def __init__(self, gguf_path: Path, *, n_seq: int = 8, n_ctx: int = 512, pooling: str = "mean") -> None:
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        self.model = llama_cpp.llama_model_load_from_file(str(gguf_path).encode(), params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {gguf_path}")
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = n_ctx * n_seq
        cparams.n_batch = cparams.n_ubatch = n_ctx * n_seq
        cparams.n_seq_max = n_seq
        cparams.n_threads = cparams.n_threads_batch = 2
        cparams.embeddings = True
        cparams.pooling_type = POOLING[pooling]
        self.ctx = llama_cpp.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            raise RuntimeError("llama.cpp could not create an embedding context")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_embd = llama_cpp.llama_model_n_embd(self.model)
        self.n_seq = n_seq

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        size = len(data) + 8
        buf = (llama_cpp.llama_token * size)()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, size, add_special, False)
        if n < 0:
            raise RuntimeError(f"tokenize failed ({n})")
        return list(buf[:n])

    def meta(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode() if n >= 0 else None

    def embed(self, texts: list[str]) -> np.ndarray:
        """One pooled vector per text (not normalised), all texts in one llama_decode."""
        if len(texts) > self.n_seq:
            raise ValueError(f"{len(texts)} texts, context has {self.n_seq} sequences")
        tokenised = [self.tokenize(text) for text in texts]
        total = sum(len(ids) for ids in tokenised)
        batch = llama_cpp.llama_batch_init(total, 0, 1)
        try:
            i = 0
            for seq, ids in enumerate(tokenised):
                for pos, token in enumerate(ids):
                    batch.token[i] = token
                    batch.pos[i] = pos
                    batch.n_seq_id[i] = 1
                    batch.seq_id[i][0] = seq
                    batch.logits[i] = True
                    i += 1
            batch.n_tokens = total
            memory = llama_cpp.llama_get_memory(self.ctx)
            if memory:  # BERT keeps no KV cache: llama.cpp gives it no memory
                llama_cpp.llama_memory_clear(memory, True)
            rc = llama_cpp.llama_decode(self.ctx, batch)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            rows = []
            for seq in range(len(texts)):
                ptr = llama_cpp.llama_get_embeddings_seq(self.ctx, seq)
                rows.append(np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).copy())
            return np.stack(rows)
        finally:
            llama_cpp.llama_batch_free(batch)

    def close(self) -> None:
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            llama_cpp.llama_model_free(self.model)
            self.model = None
