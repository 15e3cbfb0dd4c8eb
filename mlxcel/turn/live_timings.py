"""llama-server's `timings` object while a generation is still running (for
`timings_per_token`): the prompt side read from the engine's progress events, the
generation side from when tokens arrive. The final chunk uses the engine's own
Timings from the FinishEvent."""

from __future__ import annotations

import time

from mlxcel.engine.request import PromptProgressEvent, Timings


class LiveTimings:
    def __init__(self) -> None:
        self._started = time.monotonic()  # replaced by when the slot took the request
        self._total = 0
        self._cache = 0
        self._first_token_at: float | None = None
        self._prompt_ms = 0.0
        self._predicted_n = 0

    def progress(self, event: PromptProgressEvent) -> None:
        self._started = time.monotonic() - event.time_ms / 1e3
        self._total, self._cache = event.total, event.cache
        self._prompt_ms = float(event.time_ms)

    def token(self) -> None:
        now = time.monotonic()
        if self._first_token_at is None:
            self._first_token_at = now
            self._prompt_ms = (now - self._started) * 1e3
        self._predicted_n += 1

    def to_dict(self) -> dict:
        predicted_ms = 0.0
        if self._first_token_at is not None:
            predicted_ms = (time.monotonic() - self._first_token_at) * 1e3
        return Timings(cache_n=self._cache, prompt_n=max(self._total - self._cache, 0), prompt_ms=self._prompt_ms,
                       predicted_n=self._predicted_n, predicted_ms=predicted_ms).to_dict()
