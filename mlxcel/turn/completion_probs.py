"""llama-server's `completion_probabilities`: one entry per generated token,
{id, token, bytes, logprob, top_logprobs: [{id, token, bytes, logprob}]}, or with
post-sampling probabilities {id, token, bytes, prob, top_probs: [...]}.

Pre-sampling values are the log-softmax of the raw logits; post-sampling ones are
the sampler chain's probabilities over the candidates that survived it. A token's
text is its piece (control tokens: empty) cut before an incomplete UTF-8 sequence;
`bytes` is the whole piece."""

from __future__ import annotations

import math

from mlxcel.engine.request import TokenEvent
from mlxcel.engine.tokenizer import Tokenizer

MAX_N_PROBS = 100  # n_probs beyond this is served as this many: the list holds "at most n_probs" entries
FLOAT_LOWEST = -3.4028234663852886e38  # llama-server's log(0): its JSON writer would turn -inf into null


def requested_n_probs(n_probs: int | None) -> int | None:
    """The engine's `logprobs` for a request's n_probs: None when off (absent or <= 0)."""
    if n_probs is None or n_probs <= 0:
        return None
    return min(n_probs, MAX_N_PROBS)


def before_stop_word(events: list[TokenEvent], stop_word: str | None, tokenizer: Tokenizer) -> list[TokenEvent]:
    """The tokens a non-streamed answer lists probabilities for: those generated, less as
    many as the stop word that ended the answer tokenizes to (its text is not in the
    answer), as llama-server cuts them for every API."""
    if not stop_word:
        return events
    cut = len(tokenizer.encode(stop_word, add_special=False, parse_special=False))
    return events[: max(0, len(events) - cut)]


def _complete_utf8(raw: bytes) -> bytes:
    """`raw` without a multi-byte sequence cut off at its end (llama-server's validate_utf8)."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        needed = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 0
        if needed:
            return raw[:-back] if back < needed else raw
    return raw


def _logprob(value: float | None) -> float:
    if value is None:
        return 0.0
    return value if value > -math.inf else FLOAT_LOWEST


class CompletionProbs:
    def __init__(self, tokenizer: Tokenizer, post_sampling: bool) -> None:
        self._tokenizer = tokenizer
        self._post = post_sampling
        self._value_key = "prob" if post_sampling else "logprob"
        self._top_key = "top_probs" if post_sampling else "top_logprobs"

    def _token(self, token: int, value: float) -> dict:
        raw = self._tokenizer.piece(token)
        return {
            "id": token,
            "token": _complete_utf8(raw).decode("utf-8", errors="replace"),
            "bytes": list(raw),
            self._value_key: value,
        }

    def entry(self, event: TokenEvent) -> dict:
        if self._post:
            value = 1.0 if event.prob is None else event.prob  # a forced token: llama-server's default
            top = [self._token(t, p) for t, p in event.top_probs or []]
        else:
            value = _logprob(event.logprob)
            top = [self._token(t, _logprob(lp)) for t, lp in event.top_logprobs or []]
        return {**self._token(event.token, value), self._top_key: top}

    def entries(self, events: list[TokenEvent]) -> list[dict]:
        return [self.entry(e) for e in events]
