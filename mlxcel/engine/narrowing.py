"""Running a sampler chain over the tokens that can survive its first cut, not the
whole vocabulary.

llama_sampler_sample copies every logit into a candidates array and runs the chain on
all of it: on a 152k vocabulary the copy, the penalties' lookup of every candidate and
top-k's partial sort cost ~0.5 ms a token on a Zen 3 core, a few percent of a 0.5B
model's decode step. Yet a chain whose first samplers only change the logits of known
tokens (logit biases, the repeat penalties over the recent window) and which then
keeps its top k (top-k itself, or greedy's top 1) passes on only tokens from a small
set: those known tokens, and the ids of the k + (their number) largest raw logits. A
token the first samplers leave alone that ends among the top k has fewer than k
untouched tokens above it, raw as after, plus at most every touched one.

So the chain runs on that set (a few hundred tokens, ascending ids as in the full
array) and picks what it would pick on the whole vocabulary: the same samplers, the
same random draws, the same survivors in the same order. Only an exact tie at the
k-th logit may keep another of the tied tokens.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable

import numpy as np

from mlxcel.engine.top_logits import top_threshold

# samplers that only change the logits of tokens the chain knows of
_BEFORE_THE_CUT = frozenset({"bans", "logit_bias", "penalties"})
# the set must stay this much smaller than the vocabulary to pay for itself
_MAX_SHARE = 1 / 16


class Narrowing:
    """One chain's candidate set: what its biases name, what its penalties' window
    holds (mirrored from the tokens the chain accepts), the top of the raw logits."""

    def __init__(self, k: int, biased: Iterable[int], window: int) -> None:
        self.k = k
        self._biased = np.array(sorted(biased), dtype=np.intp)
        self._window = window  # the penalties' history in tokens; 0: no penalties before the cut
        self._recent: deque[int] = deque()
        self._counts: dict[int, int] = {}

    @classmethod
    def of_chain(cls, added: list[str], top_k: int, biased: Iterable[int], window: int) -> Narrowing | None:
        """The narrowing for a chain of these samplers (by name, in order), or None
        where a sampler reads the whole vocabulary before the chain cuts it."""
        for i, name in enumerate(added):
            if name in _BEFORE_THE_CUT:
                continue
            if name not in ("top_k", "greedy"):
                return None
            before = added[:i]
            return cls(top_k if name == "top_k" else 1,
                       biased if {"bans", "logit_bias"} & set(before) else (),
                       window if "penalties" in before else 0)
        return None

    def accepted(self, token: int) -> None:
        """The chain accepted `token`: its penalties' window moves on."""
        if not self._window:
            return
        self._recent.append(token)
        self._counts[token] = self._counts.get(token, 0) + 1
        self._trim()

    def accepted_all(self, tokens: list[int]) -> None:
        """accepted() for each of `tokens` in turn (a prompt, at once)."""
        if not self._window:
            return
        tail = tokens[-self._window :]
        self._recent.extend(tail)
        for token, n in Counter(tail).items():
            self._counts[token] = self._counts.get(token, 0) + n
        self._trim()

    def _trim(self) -> None:
        """Drop the tokens that fell out of the window, oldest first."""
        counts = self._counts
        for _ in range(len(self._recent) - self._window):
            old = self._recent.popleft()
            left = counts[old] - 1
            if left:
                counts[old] = left
            else:
                del counts[old]

    def candidate_ids(self, logits: np.ndarray) -> np.ndarray | None:
        """Ascending ids to run the chain on, or None where the set would be too
        large a share of the vocabulary to pay (run it on all of them). The touched
        ids are marked in the row's mask: right after a decode (cold caches) that is
        ~0.1 ms a token cheaper than a sorted union with the top ids
        (bench/after_decode.py)."""
        touched = self._biased.shape[0] + len(self._counts)
        m = self.k + touched
        if m > logits.shape[0] * _MAX_SHARE:
            return None
        threshold = top_threshold(logits, m)
        if threshold is None:
            return np.arange(logits.shape[0])
        mask = logits >= threshold
        if self._biased.shape[0]:
            mask[self._biased] = True
        if self._counts:
            mask[list(self._counts)] = True
        return np.flatnonzero(mask)
