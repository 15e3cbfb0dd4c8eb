"""A llama_token_data_array over a numpy buffer: a sampler chain runs on it as
llama_sampler_sample would (on every token, or on the few a Narrowing picked), and
what the chain left (the surviving candidates and their probabilities) can then be
read, for llama-server's post-sampling probabilities.

Samplers may shrink the array, reorder it or move its `data` pointer forward (XTC
does); `surviving()` reads the array as they left it."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
assert TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


class Candidates:
    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self.buffer = np.zeros(0, dtype=TOKEN_DATA)  # grows to the largest set run so far
        self._all_ids: np.ndarray | None = None
        self.array = llama_cpp.llama_token_data_array()

    def run(self, chain, logits: np.ndarray, ids: np.ndarray | None = None) -> int:
        """The tokens `ids` (ascending; None: every token) with these logits through
        `chain` (applied, not accepted); the token it selected."""
        if ids is None:
            if self._all_ids is None:
                self._all_ids = np.arange(self.n_vocab, dtype=np.int32)
            ids = self._all_ids
        n = ids.shape[0]
        if self.buffer.shape[0] < n:
            self.buffer = np.zeros(n, dtype=TOKEN_DATA)
        entries = self.buffer[:n]
        entries["id"] = ids
        entries["logit"] = logits if n == self.n_vocab else logits[ids]
        entries["p"] = 0.0
        self.array.data = self.buffer.ctypes.data_as(llama_cpp.llama_token_data_p)
        self.array.size = n
        self.array.selected = -1
        self.array.sorted = False
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(self.array))
        if not 0 <= self.array.selected < self.array.size:
            raise RuntimeError("the sampler chain selected no token")
        return int(self.surviving()["id"][self.array.selected])

    def surviving(self) -> np.ndarray:
        """The entries [data, data + size) as the chain left them (a view)."""
        start = ctypes.cast(self.array.data, ctypes.c_void_p).value or 0
        offset = (start - self.buffer.ctypes.data) // TOKEN_DATA.itemsize
        return self.buffer[offset : offset + self.array.size]


def post_sampling_probs(entries: np.ndarray, token: int, k: int) -> tuple[float, list[tuple[int, float]]]:
    """The sampled token's probability among `entries` (1.0 when it is not there, as
    llama-server leaves it) and the `k` most probable entries with a non-zero
    probability, most probable first (ties by lower id)."""
    ids, probs = entries["id"], entries["p"]
    hit = np.flatnonzero(ids == token)
    prob = float(probs[hit[0]]) if hit.shape[0] else 1.0
    order = np.lexsort((ids, -probs))[:k] if k > 0 else []
    return prob, [(int(ids[i]), float(probs[i])) for i in order if probs[i] > 0.0]
