"""Token logprobs in OpenAI's chat shape: {"content": [{token, logprob, bytes, top_logprobs}]}."""

from __future__ import annotations

from mlxcel.engine.request import TokenEvent
from mlxcel.engine.tokenizer import Tokenizer


class LogprobFormatter:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer

    def _token(self, token: int) -> tuple[str, list[int]]:
        raw = self._tokenizer.special_piece(token)
        return raw.decode("utf-8", errors="replace"), list(raw)

    def entry(self, event: TokenEvent) -> dict:
        text, raw = self._token(event.token)
        top = []
        for token, logprob in event.top_logprobs or []:
            top_text, top_raw = self._token(token)
            top.append({"token": top_text, "logprob": logprob, "bytes": top_raw})
        return {"token": text, "logprob": event.logprob, "bytes": raw, "top_logprobs": top}

    def chunk(self, event: TokenEvent) -> dict:
        return {"content": [self.entry(event)]}

    def whole(self, events: list[TokenEvent]) -> dict:
        return {"content": [self.entry(e) for e in events]}
