"""Drafts from a small model with the target's vocabulary (`--model-draft`).

The draft context has one sequence per slot, kept in step with the slot's tokens:
before drafting, the draft model's memory is cut back to what it shares with the
slot's history and the rest is decoded; then it proposes tokens greedily, one
decode each. Owned by the engine thread, like the target context."""

from __future__ import annotations

import time

import numpy as np

from mlxcel.engine.batch import TokenBatch
from mlxcel.engine.llama_runtime import LlamaRuntime, greedy_token
from mlxcel.engine.slots import common_prefix_length

NO_BANS = np.zeros(0, dtype=np.int32)  # a draft is the row's plain argmax


class DraftModel:
    def __init__(self, runtime: LlamaRuntime, n_vocab: int) -> None:
        self.runtime = runtime
        self.n_vocab = n_vocab
        self._batch = TokenBatch(runtime.n_batch)
        self._cached: list[list[int]] = [[] for _ in range(runtime.config.n_parallel)]
        self.seconds_per_token = 0.0  # running mean of what one drafted token costs, catch-up included

    def _decode(self, seq: int, tokens: list[int], start: int) -> bool:
        """Decode `tokens` at `start..`, logits for the last; False on failure."""
        for offset in range(0, len(tokens), self._batch.capacity):
            chunk = tokens[offset : offset + self._batch.capacity]
            self._batch.clear()
            self._batch.add_span(chunk, start + offset, seq, logits_last=offset + len(chunk) == len(tokens))
            if self.runtime.decode(self._batch.seal()) != 0:
                self.runtime.seq_clear(seq)
                self._cached[seq].clear()
                return False
        return True

    def _sync(self, seq: int, history: list[int]) -> bool:
        cached = self._cached[seq]
        keep = min(common_prefix_length(cached, history), len(history) - 1)  # refeed one for its logits
        if keep < len(cached) and not self.runtime.seq_remove(seq, keep, -1):
            self.runtime.seq_clear(seq)
            keep = 0
        del cached[keep:]
        if not self._decode(seq, history[keep:], keep):
            return False
        cached.extend(history[keep:])
        return True

    def draft(self, seq: int, history: list[int], limit: int) -> list[int]:
        started = time.perf_counter()
        drafts = self._draft(seq, history, limit)
        if drafts:
            per_token = (time.perf_counter() - started) / len(drafts)
            self.seconds_per_token += 0.2 * (per_token - self.seconds_per_token)
        return drafts

    def _draft(self, seq: int, history: list[int], limit: int) -> list[int]:
        if limit <= 0 or not history or not self._sync(seq, history):
            return []
        drafts: list[int] = []
        index = self._batch.size - 1
        while True:
            token = greedy_token(self.runtime.ctx, index, self.n_vocab, NO_BANS)
            drafts.append(token)
            if len(drafts) >= limit:
                return drafts
            if not self._decode(seq, [token], len(self._cached[seq])):
                return drafts
            self._cached[seq].append(token)
            index = 0

    def forget(self, seq: int) -> None:
        self.runtime.seq_clear(seq)
        self._cached[seq].clear()
