"""A llama_token_data_array over a numpy buffer, for running llama.cpp samplers
on logits a test holds.

Samplers may shrink the array, reorder it, move its `data` pointer forward (XTC
does) or set logits to -inf (top-n-sigma does); `current()` and `surviving_ids()`
read the array as the samplers left it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp
import numpy as np

TOKEN_DATA_DTYPE = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
assert TOKEN_DATA_DTYPE.itemsize == ctypes.sizeof(llama_cpp.llama_token_data)


class TokenDataArray:
    """One reusable candidates array for a vocabulary of `n_vocab` tokens."""

    def __init__(self, n_vocab: int) -> None:
        self.buffer = np.zeros(n_vocab, dtype=TOKEN_DATA_DTYPE)
        self._ids = np.arange(n_vocab, dtype=np.int32)
        self.array = llama_cpp.llama_token_data_array()
        self.load(np.zeros(n_vocab, dtype=np.float32))

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> TokenDataArray:
        return cls(logits.shape[0]).load(logits)

    def load(self, logits: np.ndarray) -> TokenDataArray:
        """Resets the array to every token with these logits, unsorted, none selected."""
        self.buffer["id"] = self._ids
        self.buffer["logit"] = logits
        self.buffer["p"] = 0.0
        self.array.data = self.buffer.ctypes.data_as(llama_cpp.llama_token_data_p)
        self.array.size = self.buffer.shape[0]
        self.array.selected = -1
        self.array.sorted = False
        return self

    def apply(self, sampler: Any) -> None:
        """Runs one sampler (a pointer from a llama_sampler_init_* call) on the array."""
        llama_cpp.llama_sampler_apply(sampler, ctypes.byref(self.array))

    def current(self) -> np.ndarray:
        """The entries [data, data + size) as the samplers left them (a view)."""
        start = ctypes.cast(self.array.data, ctypes.c_void_p).value or 0
        offset = (start - self.buffer.ctypes.data) // TOKEN_DATA_DTYPE.itemsize
        return self.buffer[offset : offset + self.array.size]

    def surviving_ids(self) -> list[int]:
        """Sorted ids of the candidates still in the array with a finite logit."""
        entries = self.current()
        return sorted(entries["id"][entries["logit"] > -np.inf].tolist())

    def selected_token(self) -> int | None:
        """The token a final sampler (greedy, dist) picked, if any."""
        if self.array.selected < 0:
            return None
        return int(self.current()["id"][self.array.selected])
