"""Prefill of media positions: a prefilling slot whose next positions are a media
span decodes a chunk of that span's embeddings in a batch of its own (llama.cpp takes
either token ids or embeddings in one batch, not both). Chunks are bounded like text
prefill chunks, so an image entering one slot delays the other streams no more than a
text prompt of the same length would; a non-causal span goes whole, as its rows attend
to each other."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import llama_cpp
import numpy as np

from mlxcel.engine.media_span import MediaSpan
from mlxcel.engine.slots import Slot

_INT_P = ctypes.POINTER(ctypes.c_int32)


@dataclass(eq=False)
class MediaChunk:
    slot: Slot
    span: MediaSpan
    offset: int  # the span's first row decoded now
    n: int  # rows decoded now
    last: bool  # they end the prompt: the last row's logits are sampled

    @property
    def start(self) -> int:
        return self.span.start + self.offset


def plan_media_chunk(prefilling: list[Slot], budget: int) -> MediaChunk | None:
    """The chunk for the first of `prefilling` (oldest first) standing at a media
    position, at most `budget` rows unless its span is non-causal."""
    for slot in prefilling:
        request = slot.request
        if request is None or not request.media:
            continue
        span = request.media.at(slot.n_past)
        if span is None:
            continue
        offset = slot.n_past - span.start
        n = span.n_tokens - offset if span.non_causal else min(max(budget, 1), span.n_tokens - offset)
        return MediaChunk(slot, span, offset, n, last=slot.n_past + n >= len(request.prompt_tokens))
    return None


class EmbeddingBatch:
    """A llama_batch of consecutive positions of one sequence, fed from rows of
    embeddings (no copy of the rows: the batch points into them)."""

    def __init__(self, rows: np.ndarray, start: int, seq_id: int, logits_last: bool) -> None:
        n = int(rows.shape[0])
        self.rows = np.ascontiguousarray(rows, dtype=np.float32)
        self.positions = np.arange(start, start + n, dtype=np.int32)
        self.seq_ids = np.full(n, seq_id, dtype=np.int32)
        self.n_seq_id = np.ones(n, dtype=np.int32)
        self.wants_logits = np.zeros(n, dtype=np.int8)
        if logits_last:
            self.wants_logits[-1] = 1
        base = self.seq_ids.ctypes.data
        self._seq_ptrs = (_INT_P * n)(*(ctypes.cast(base + 4 * i, _INT_P) for i in range(n)))
        self.struct = llama_cpp.llama_batch(
            n_tokens=n,
            token=None,
            embd=self.rows.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
            pos=self.positions.ctypes.data_as(_INT_P),
            n_seq_id=self.n_seq_id.ctypes.data_as(_INT_P),
            seq_id=self._seq_ptrs,
            logits=self.wants_logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )
