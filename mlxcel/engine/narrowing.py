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

So the chain runs on that set (ids of every logit >= the (k + touched)-th largest,
then the touched ones; a hundred-odd tokens, ascending ids as in the full array) and
picks what it would pick on the whole vocabulary: the same samplers, the same random
draws, the same survivors. Only an exact tie at the k-th logit may keep another of
the tied tokens. The set is written by one C call (`_topset.fill`) straight into the
llama_token_data entries the chain runs on.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable

import numpy as np

from mlxcel.engine import _topset

# samplers that only change the logits of tokens the chain knows of
_BEFORE_THE_CUT = frozenset({"bans", "logit_bias", "penalties"})
# the set must stay this much smaller than the vocabulary to pay for itself
_MAX_SHARE = 1 / 16
_NO_IDS = np.zeros(0, dtype=np.int32)


class Narrowing:
    """One chain's candidate set: what its biases name, what its penalties' window
    holds (mirrored from the tokens the chain accepts), the top of the raw logits."""

    def __init__(self, k: int, biased: Iterable[int], window: int) -> None:
        self.k = k
        self._biased = np.array(sorted(biased), dtype=np.int32)
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

    def fill(self, logits: np.ndarray, entries: np.ndarray) -> int | None:
        """Write the set into `entries` (llama_token_data, p 0), ascending ids; how many,
        or None where the chain must run on the whole row: the set would be too large a
        share of the vocabulary to pay, larger than `entries`, or cannot be told (a NaN,
        a row masked down to fewer finite logits than it needs)."""
        n = _topset.fill(logits, self.k, max_set(logits.shape[0]), self._biased, self.window_ids(), entries)
        return n if n >= 0 else None

    @property
    def biased(self) -> np.ndarray:
        return self._biased

    def window_ids(self) -> np.ndarray:
        """The ids in the penalties' window, once each (int32)."""
        counts = self._counts
        return np.fromiter(counts, np.int32, len(counts)) if counts else _NO_IDS


def max_set(n_vocab: int) -> int:
    """The largest candidate set worth narrowing to."""
    return int(n_vocab * _MAX_SHARE)
