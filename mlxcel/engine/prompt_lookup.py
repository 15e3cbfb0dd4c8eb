"""Prompt-lookup drafts: the tokens that followed the earlier occurrence of the
sequence's tail that matches it longest, in the prompt or in what was generated so
far (the latest such occurrence on a tie). A context that repeats with variations
(lines of code that differ in a number, numbered lists) then drafts from the place
being copied rather than from the last similar line.

Every position is indexed by the `ngram` tokens before it; a draft extends each of
the latest few occurrences of the tail's last `ngram` tokens backwards and keeps the
longest. How long the match is says how far to trust the draft: the engine keeps
its acceptance statistics per match-length class (`match_class`)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_MATCH = 64  # a match is not extended past this many tokens
CANDIDATES = 16  # latest occurrences of the n-gram compared per draft
MATCH_CLASSES = (8, 16)  # a match shorter than 8 tokens is class 0, shorter than 16 class 1, else 2


def match_class(length: int) -> int:
    return sum(1 for bound in MATCH_CLASSES if length >= bound)


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]
    match: int  # how many tokens of the history's tail matched where they were copied from


NO_PROPOSAL = Proposal([], 0)


class PromptLookup:
    def __init__(self, ngram: int, max_draft: int, min_draft: int = 1) -> None:
        self.ngram = max(1, ngram)
        self.max_draft = max_draft
        self.min_draft = max(1, min_draft)
        self._followers: dict[tuple[int, ...], list[int]] = {}  # n-gram -> indices of the tokens after it
        self._indexed = 0  # followers of positions below this are indexed

    def _sync(self, history: list[int], end: int) -> None:
        """Index the follower of every n-gram whose follower lies below `end`."""
        if end < self._indexed:  # the history was cut: index it again
            self._followers.clear()
            self._indexed = 0
        n = self.ngram
        followers = self._followers
        for p in range(max(n, self._indexed), end):
            key = tuple(history[p - n : p])
            found = followers.get(key)
            if found is None:
                followers[key] = [p]
            else:
                found.append(p)
        self._indexed = max(self._indexed, end)

    def draft(self, history: list[int], limit: int) -> Proposal:
        """Up to min(limit, max_draft) tokens predicted to follow `history`."""
        limit = min(limit, self.max_draft)
        n = self.ngram
        if limit < self.min_draft or len(history) <= n:
            return NO_PROPOSAL
        self._sync(history, len(history) - 1)  # never the tail itself
        found = self._followers.get(tuple(history[-n:]))
        if not found:
            return NO_PROPOSAL
        end = len(history)
        best, best_match = -1, 0
        most = min(MAX_MATCH, end - 1)
        for p in reversed(found[-CANDIDATES:]):
            m = n
            while m < most and p - m - 1 >= 0 and history[p - m - 1] == history[end - m - 1]:
                m += 1
            if m > best_match:
                best, best_match = p, m
                if m >= most:
                    break
        tokens = history[best : best + limit]
        return Proposal(tokens, best_match) if len(tokens) >= self.min_draft else NO_PROPOSAL
