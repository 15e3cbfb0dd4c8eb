"""A llama_token_data_array over a numpy buffer: a sampler chain runs on it as
llama_sampler_sample would (on every token, or on the few a Narrowing wrote), and
what the chain left (the surviving candidates and their probabilities) can then be
read, for llama-server's post-sampling probabilities.

Samplers may shrink the array, reorder it or move its `data` pointer forward (XTC
does); `surviving()` reads the array as they left it."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np

from mlxcel.engine import _topset, llama_runtime
from mlxcel.engine.narrowing import max_set

TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
assert TOKEN_DATA.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)
# the layout _topset.chain_pick writes: data, size, selected, sorted
assert [f[0] for f in llama_cpp.llama_token_data_array._fields_] == ["data", "size", "selected", "sorted"]
assert llama_cpp.llama_token_data_array.selected.offset == 16 and llama_cpp.llama_token_data_array.sorted.offset == 24

_lib = llama_cpp.llama_cpp._lib
_APPLY = ctypes.cast(_lib.llama_sampler_apply, ctypes.c_void_p).value
_ACCEPT = ctypes.cast(_lib.llama_sampler_accept, ctypes.c_void_p).value


class Candidates:
    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self.buffer = np.zeros(0, dtype=TOKEN_DATA)  # the whole vocabulary's, made on first use
        self._all_ids: np.ndarray | None = None
        self._narrowed: np.ndarray | None = None  # a Narrowing's sets, made on first use
        self._narrowed_data = None
        self._ran = self.buffer  # the buffer the last run's array points into
        self.array = llama_cpp.llama_token_data_array()
        self._array_ref = ctypes.byref(self.array)
        self._array_address = ctypes.addressof(self.array)

    def run(self, chain, logits: np.ndarray) -> int:
        """Every token with these logits through `chain` (applied, not accepted); the
        token it selected."""
        if self._all_ids is None:
            self._all_ids = np.arange(self.n_vocab, dtype=np.int32)
            self.buffer = np.zeros(self.n_vocab, dtype=TOKEN_DATA)
        self.buffer["id"] = self._all_ids
        self.buffer["logit"] = logits
        self.buffer["p"] = 0.0
        return self._apply(chain, self.buffer, self.buffer.ctypes.data_as(llama_cpp.llama_token_data_p), self.n_vocab)

    def run_narrowed(self, chain, logits: np.ndarray, narrowing) -> int | None:
        """`chain` (applied, not accepted) on the set `narrowing` writes for these
        logits; the token it selected, or None where the set could not be had (run()
        the whole row then)."""
        self._make_narrowed()
        n = narrowing.fill(logits, self._narrowed)
        return None if n is None else self._apply(chain, self._narrowed, self._narrowed_data, n)

    def _make_narrowed(self) -> None:
        """The buffer a Narrowing's set is written into, made on first use."""
        if self._narrowed is None:
            self._narrowed = np.zeros(max(64, self.n_vocab // 8), dtype=TOKEN_DATA)
            self._narrowed_data = self._narrowed.ctypes.data_as(llama_cpp.llama_token_data_p)

    def pick_narrowed(self, chain_address: int, ctx: int, batch_index: int, narrowing) -> int | None:
        """run_narrowed on the row llama.cpp holds for `batch_index`, and the pick accepted
        by the chain, in one C call that keeps the GIL (right after a decode, the row's
        numpy view, the set, the array's fields and two ctypes calls that each released the
        GIL took ~0.1 ms of cold Python); None where the set cannot be had, with nothing
        applied or accepted."""
        self._make_narrowed()
        self._ran = self._narrowed
        token = _topset.chain_pick(llama_runtime.LOGITS_ITH, _APPLY, _ACCEPT, ctx, batch_index, self.n_vocab,
                                   narrowing.k, max_set(self.n_vocab), narrowing.biased, narrowing.window_ids(),
                                   self._narrowed, self._array_address, chain_address)
        return token if token >= 0 else None

    def _apply(self, chain, buffer: np.ndarray, data, n: int) -> int:
        array = self.array
        array.data = data
        array.size = n
        array.selected = -1
        array.sorted = False
        self._ran = buffer
        llama_cpp.llama_sampler_apply(chain, self._array_ref)
        if not 0 <= array.selected < array.size:
            raise RuntimeError("the sampler chain selected no token")
        return array.data[array.selected].id

    def surviving(self) -> np.ndarray:
        """The entries [data, data + size) as the chain left them (a view)."""
        start = ctypes.cast(self.array.data, ctypes.c_void_p).value or 0
        offset = (start - self._ran.ctypes.data) // TOKEN_DATA.itemsize
        return self._ran[offset : offset + self.array.size]


def post_sampling_probs(entries: np.ndarray, token: int, k: int) -> tuple[float, list[tuple[int, float]]]:
    """The sampled token's probability among `entries` (1.0 when it is not there, as
    llama-server leaves it) and the `k` most probable entries with a non-zero
    probability, most probable first (ties by lower id)."""
    ids, probs = entries["id"], entries["p"]
    hit = np.flatnonzero(ids == token)
    prob = float(probs[hit[0]]) if hit.shape[0] else 1.0
    order = np.lexsort((ids, -probs))[:k] if k > 0 else []
    return prob, [(int(ids[i]), float(probs[i])) for i in order if probs[i] > 0.0]
