"""Media in a prompt, as the engine sees it: a run of positions whose inputs are
embeddings a projector computed (an image, an audio window, a video frame) instead
of token ids.

In `GenerationRequest.prompt_tokens` those positions hold stand-in ids: negative
numbers drawn from the media's content hash. No real token is negative, so a stand-in
never reaches llama.cpp, the sampler or a drafter; and since equal content gives
equal stand-ins, the slots' prefix matching and the host prompt cache's block hashes
treat a repeated image like repeated text: its KV memory is reused, not rebuilt.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from dataclasses import dataclass

import numpy as np


def stand_in_tokens(key: bytes, n: int) -> list[int]:
    """`n` stand-in ids for media whose content hash is `key`: negative, below -1
    (llama.cpp's "no token" is -1), and different for different keys."""
    seed = int.from_bytes(hashlib.sha256(b"mlxcel-media" + key).digest()[:8], "little")
    return (-np.random.default_rng(seed).integers(2, 2**31 - 1, size=n)).tolist()


def is_stand_in(token: int) -> bool:
    return token < -1


@dataclass(frozen=True, eq=False)
class MediaSpan:
    """Prompt positions [start, start + n_tokens) fed from `embeddings` (one row per
    position, float32, C-contiguous). `non_causal`: the projector's tokens attend to
    each other both ways, so they are decoded in one batch with causal attention off,
    and never kept in part."""

    start: int
    embeddings: np.ndarray
    non_causal: bool = False

    @property
    def n_tokens(self) -> int:
        return int(self.embeddings.shape[0])

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


class MediaLayout:
    """The media spans of one prompt, ordered by position, for quick lookups."""

    def __init__(self, spans: tuple[MediaSpan, ...]) -> None:
        self.spans = tuple(sorted(spans, key=lambda span: span.start))
        self._starts = [span.start for span in self.spans]

    def __bool__(self) -> bool:
        return bool(self.spans)

    def at(self, position: int) -> MediaSpan | None:
        """The span holding `position`, if any."""
        i = bisect_right(self._starts, position) - 1
        if i >= 0 and self.spans[i].end > position:
            return self.spans[i]
        return None

    def text_run(self, position: int, limit: int) -> int:
        """How many positions from `position` (at most `limit`) are text, before the
        next span starts (0 at a span)."""
        if self.at(position) is not None:
            return 0
        i = bisect_right(self._starts, position)
        if i < len(self.spans):
            return max(0, min(limit, self.spans[i].start - position))
        return limit

    def widest_non_causal(self) -> int:
        """The most positions a non-causal span takes (0 without one): llama.cpp must
        decode it in one micro-batch (n_ubatch), or it aborts the process."""
        return max((span.n_tokens for span in self.spans if span.non_causal), default=0)

    def safe_prefix(self, n_kept: int) -> int:
        """A reusable prefix length no longer than `n_kept` that does not end inside
        a non-causal span (its rows were computed together: a part of them is wrong)."""
        span = self.at(n_kept - 1) if n_kept > 0 else None
        if span is not None and span.non_causal and span.end > n_kept:
            return span.start
        return n_kept
