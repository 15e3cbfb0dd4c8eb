"""Prompt-lookup drafts: the tokens that followed the earlier occurrence of the
sequence's tail that matches it longest, in the prompt or in what was generated so
far (the latest such occurrence on a tie). A context that repeats with variations
(lines of code that differ in a number, numbered lists) then drafts from the place
being copied rather than from the last similar line.

Every position is indexed by the `ngram` tokens before it; a draft extends each of
the latest few occurrences of the tail's last `ngram` tokens backwards and keeps the
longest. How long the match is says how far to trust the draft: the engine keeps
its acceptance statistics per match-length class (`match_class`).

A request may also bring a predicted output (OpenAI's `prediction`): the text it
expects back, such as the file an edit rewrites. While what was generated so far is
the prediction's beginning, the draft is the prediction's next tokens (class
`PREDICTED`); once the output departs from it, a match of the tail in the prediction
rejoins it after the edit (class `REJOINED`). The engine drafts whichever of the
history's and the prediction's proposals its acceptance statistics expect more of, so a
prediction the output keeps departing from stops being drafted."""

from __future__ import annotations

from dataclasses import dataclass

MAX_MATCH = 64  # a match is not extended past this many tokens
CANDIDATES = 16  # latest occurrences of the n-gram compared per draft
MATCH_CLASSES = (8, 16)  # a match shorter than 8 tokens is class 0, shorter than 16 class 1, else 2
# the classes of a prediction's drafts: the output so far is the prediction's beginning
# (its next tokens are drafted); the output departed from it and its tail matches it again
PREDICTED, REJOINED = len(MATCH_CLASSES) + 1, len(MATCH_CLASSES) + 2
# the first class of drafts copied from earlier requests' outputs (traffic_ngrams): one
# per match-length class, as the request's own (TRAFFIC + match_class(match))
TRAFFIC = len(MATCH_CLASSES) + 3
# the class of drafts from llama.cpp's lookup caches (lookup_cache), after the traffic's
LOOKUP_CACHE = TRAFFIC + len(MATCH_CLASSES) + 1
# a prediction's n-grams are indexed this many positions a draft at most, so a long one
# never holds the engine's step (a 32k-token prediction: ~30 ms at once)
PREDICTION_INDEX_STEP = 256
PREDICTION_NGRAM = 3  # the n-gram a prediction is rejoined by beside a draft model (prompt lookup's default)


def match_class(length: int) -> int:
    return sum(1 for bound in MATCH_CLASSES if length >= bound)


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]
    match: int  # how many tokens of the history's tail matched where they were copied from
    kind: int = 0  # its acceptance class: match_class(match), PREDICTED or REJOINED
    predicted: bool = False  # copied from the request's predicted output


NO_PROPOSAL = Proposal([], 0)


def _index(tokens: list[int], n: int, followers: dict[tuple[int, ...], list[int]], start: int, end: int) -> None:
    """Add the follower of every n-gram whose follower lies in [start, end)."""
    for p in range(max(n, start), end):
        key = tuple(tokens[p - n : p])
        found = followers.get(key)
        if found is None:
            followers[key] = [p]
        else:
            found.append(p)


def _longest(source: list[int], found: list[int], history: list[int], n: int, most: int) -> tuple[int, int]:
    """Of the latest CANDIDATES positions in `found` (each preceded in `source` by the
    history's last n tokens), the one whose preceding run matches the history's tail
    furthest back, and how far (at most `most`): (-1, 0) when `found` is empty."""
    end = len(history)
    best, best_match = -1, 0
    for p in reversed(found[-CANDIDATES:]):
        m = n
        while m < most and p - m - 1 >= 0 and source[p - m - 1] == history[end - m - 1]:
            m += 1
        if m > best_match:
            best, best_match = p, m
            if m >= most:
                break
    return best, best_match


class PromptLookup:
    """One sequence's drafts. `prediction`: the output the request expects (its tokens),
    which starts at history position `output_start` (the prompt's length)."""

    def __init__(self, ngram: int, max_draft: int, min_draft: int = 1, prediction: list[int] | None = None,
                 output_start: int = 0) -> None:
        self.ngram = max(1, ngram)
        self.max_draft = max_draft
        self.min_draft = max(1, min_draft)
        self._followers: dict[tuple[int, ...], list[int]] = {}  # n-gram -> indices of the tokens after it
        self._indexed = 0  # followers of positions below this are indexed
        self.prediction = list(prediction or ())
        self.output_start = output_start
        self._on_prediction = bool(self.prediction)  # the output so far is the prediction's beginning
        self._checked = 0  # output tokens compared with the prediction so far
        self._predicted_followers: dict[tuple[int, ...], list[int]] = {}
        self._predicted_indexed = 0  # followers of the prediction's positions below this are indexed

    def _sync(self, history: list[int], end: int) -> None:
        """Index the follower of every n-gram whose follower lies below `end`."""
        if end < self._indexed:  # the history was cut: index it again
            self._followers.clear()
            self._indexed = 0
        _index(history, self.ngram, self._followers, self._indexed, end)
        self._indexed = max(self._indexed, end)

    def _along_prediction(self, history: list[int]) -> int | None:
        """How many output tokens there are, while all of them are the prediction's
        beginning and some of the prediction is left; None otherwise."""
        if not self._on_prediction:
            return None
        generated = len(history) - self.output_start
        prediction = self.prediction
        if generated < self._checked:  # the history was cut: the alignment cannot be told
            self._on_prediction = False
            return None
        for i in range(self._checked, generated):
            if i >= len(prediction) or history[self.output_start + i] != prediction[i]:
                self._on_prediction = False
                return None
        self._checked = generated
        return generated if generated < len(prediction) else None

    def draft(self, history: list[int], limit: int) -> Proposal:
        """Up to min(limit, max_draft) tokens predicted to follow `history`, copied from
        the history itself."""
        limit = min(limit, self.max_draft)
        n = self.ngram
        if limit < self.min_draft or len(history) <= n:
            return NO_PROPOSAL
        self._sync(history, len(history) - 1)  # never the tail itself
        found = self._followers.get(tuple(history[-n:]))
        if not found:
            return NO_PROPOSAL
        best, match = _longest(history, found, history, n, min(MAX_MATCH, len(history) - 1))
        return self._proposal(history, best, match, limit, match_class(match))

    def predicted(self, history: list[int], limit: int) -> Proposal:
        """The same from the request's prediction: its next tokens while the output
        follows it (class PREDICTED), else what follows the longest match of the tail in
        it (class REJOINED). Nothing without a prediction."""
        limit = min(limit, self.max_draft)
        if not self.prediction or limit < self.min_draft:
            return NO_PROPOSAL
        n = self.ngram
        if self._predicted_indexed < len(self.prediction):  # a step's share of the index
            end = min(len(self.prediction), self._predicted_indexed + PREDICTION_INDEX_STEP)
            _index(self.prediction, n, self._predicted_followers, self._predicted_indexed, end)
            self._predicted_indexed = end
        at = self._along_prediction(history)
        if at is not None:
            return self._proposal(self.prediction, at, at, limit, PREDICTED)
        if len(history) <= n:
            return NO_PROPOSAL
        found = self._predicted_followers.get(tuple(history[-n:]))
        if not found:
            return NO_PROPOSAL
        best, match = _longest(self.prediction, found, history, n, min(MAX_MATCH, len(history) - 1))
        return self._proposal(self.prediction, best, match, limit, REJOINED)

    def _proposal(self, source: list[int], start: int, match: int, limit: int, kind: int) -> Proposal:
        tokens = source[start : start + limit]
        if len(tokens) < self.min_draft:
            return NO_PROPOSAL
        return Proposal(tokens, match, kind, predicted=source is self.prediction)
