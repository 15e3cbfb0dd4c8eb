"""OpenAI's legacy `logprobs` object of /v1/completions choices: parallel lists of
each token's text, its log-probability, its most likely alternatives ({text: logprob})
and the offset of its text in the choice's text."""

from __future__ import annotations

import codecs
import math

from mlxcel.engine.logprobs import MAX_TOP_LOGPROBS
from mlxcel.engine.request import TokenEvent
from mlxcel.engine.tokenizer import Tokenizer

FLOAT_LOWEST = -3.4028234663852886e38  # a -inf logprob, which JSON cannot carry


def requested_logprobs(logprobs: int | None) -> int | None:
    """The engine's `logprobs` for the request's: None when off, at most 20 alternatives."""
    return None if logprobs is None or logprobs < 0 else min(logprobs, MAX_TOP_LOGPROBS)


def _finite(value: float | None) -> float:
    return FLOAT_LOWEST if value is None or value == -math.inf else value


class LegacyLogprobs:
    """Builds the object for one choice; `offset` starts after the echoed prompt. A
    token's offset counts the characters of the choice's text before it: a character
    split across tokens counts once, when its last byte comes (the text has it once),
    so every offset falls within the text."""

    def __init__(self, tokenizer: Tokenizer, offset: int = 0) -> None:
        self._tokenizer = tokenizer
        self.offset = offset
        self._characters = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def _text(self, token: int) -> str:
        return self._tokenizer.piece(token).decode("utf-8", errors="replace")

    def of(self, events: list[TokenEvent]) -> dict:
        body: dict = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for event in events:
            text = self._text(event.token)
            body["tokens"].append(text)
            body["token_logprobs"].append(_finite(event.logprob))
            body["top_logprobs"].append({self._text(t): _finite(lp) for t, lp in event.top_logprobs or []})
            body["text_offset"].append(self.offset)
            self.offset += len(self._characters.decode(self._tokenizer.piece(event.token)))
        return body
