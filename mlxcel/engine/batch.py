"""A llama_batch whose arrays are numpy buffers owned by Python.

Every token belongs to exactly one sequence, so `n_seq_id` is constant 1 and each
`seq_id[i]` points at element i of one contiguous int32 array.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import llama_cpp
import numpy as np


class TokenBatch:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.tokens = np.zeros(capacity, dtype=np.int32)
        self.positions = np.zeros(capacity, dtype=np.int32)
        self.seq_ids = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.wants_logits = np.zeros(capacity, dtype=np.int8)
        int_p = ctypes.POINTER(ctypes.c_int32)
        base = self.seq_ids.ctypes.data
        self._seq_ptrs = (int_p * capacity)(*(ctypes.cast(base + 4 * i, int_p) for i in range(capacity)))
        self.struct = llama_cpp.llama_batch(
            n_tokens=0,
            token=self.tokens.ctypes.data_as(int_p),
            embd=None,
            pos=self.positions.ctypes.data_as(int_p),
            n_seq_id=self.n_seq_id.ctypes.data_as(int_p),
            seq_id=self._seq_ptrs,
            logits=self.wants_logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )
        self.size = 0

    def clear(self) -> None:
        self.size = 0

    @property
    def room(self) -> int:
        return self.capacity - self.size

    def add(self, token: int, position: int, seq_id: int, logits: bool) -> int:
        """Append one token; returns its index in the batch."""
        i = self.size
        self.tokens[i] = token
        self.positions[i] = position
        self.seq_ids[i] = seq_id
        self.wants_logits[i] = 1 if logits else 0
        self.size = i + 1
        return i

    def add_span(self, tokens: Sequence[int], start_position: int, seq_id: int, logits_last: bool) -> int:
        """Append consecutive tokens of one sequence; returns the index of the last one."""
        n = len(tokens)
        i, j = self.size, self.size + n
        self.tokens[i:j] = tokens
        self.positions[i:j] = np.arange(start_position, start_position + n, dtype=np.int32)
        self.seq_ids[i:j] = seq_id
        self.wants_logits[i:j] = 0
        if logits_last:
            self.wants_logits[j - 1] = 1
        self.size = j
        return j - 1

    def seal(self) -> llama_cpp.llama_batch:
        self.struct.n_tokens = self.size
        return self.struct
