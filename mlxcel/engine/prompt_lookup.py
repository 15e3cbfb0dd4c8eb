"""Prompt-lookup drafts: the tokens that followed the latest earlier occurrence of
the sequence's last n tokens, in the prompt or in what was generated so far. The
longest matching n-gram (from `max_ngram` down to `ngram`) wins, so a context that
repeats with variations (lines of code, numbered lists) drafts from the right place."""

from __future__ import annotations

MAX_NGRAM = 8


class PromptLookup:
    def __init__(self, ngram: int, max_draft: int, min_draft: int = 1, max_ngram: int = MAX_NGRAM) -> None:
        self.sizes = list(range(max(ngram, max_ngram), ngram - 1, -1))  # longest first
        self.ngram = ngram
        self.max_draft = max_draft
        self.min_draft = max(1, min_draft)
        self._follower: dict[tuple[int, ...], int] = {}  # n-gram -> index of the token after it
        self._indexed = 0  # followers of positions below this are indexed

    def _sync(self, history: list[int], end: int) -> None:
        """Index the follower of every n-gram whose follower lies below `end`."""
        if end < self._indexed:  # the history was cut: index it again
            self._follower.clear()
            self._indexed = 0
        for p in range(max(self.ngram, self._indexed), end):
            for n in self.sizes:
                if n <= p:
                    self._follower[tuple(history[p - n : p])] = p
        self._indexed = max(self._indexed, end)

    def draft(self, history: list[int], limit: int) -> list[int]:
        """Up to min(limit, max_draft) tokens predicted to follow `history`."""
        limit = min(limit, self.max_draft)
        if limit < self.min_draft or len(history) <= self.ngram:
            return []
        self._sync(history, len(history) - 1)  # never the tail itself
        for n in self.sizes:
            start = self._follower.get(tuple(history[-n:])) if n < len(history) else None
            if start is not None:
                proposal = history[start : start + limit]
                return proposal if len(proposal) >= self.min_draft else []
        return []
