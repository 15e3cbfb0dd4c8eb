"""Cutting a long text into pieces llama.cpp tokenizes independently, at special-token
boundaries, so the result equals tokenizing the whole text at once.

llama.cpp finds special tokens in a text by scanning every fragment for every special
token, longest first; on a text holding many of them that costs time quadratic in
their number (a megabyte of `<|im_end|>` took 25 s). Splitting the text every few
hundred occurrences bounds each scan.

A cut at position p leaves the tokens unchanged when llama.cpp's own partition has a
fragment boundary at p: some special token starts at p, and no special token
occurrence crosses p (starts before it and ends after it); then, whichever token
llama.cpp matches first, nothing spans p. The whitespace rules hold too: a cut never
falls after a blank where a special token that strips blanks on its left (lstrip)
starts, and the piece after a cut starts with that special token, so llama.cpp's
rule for text after a special token (SentencePiece's space prefix) reads it as before.
Pieces are tokenized without BOS/EOS; those are added once, around the whole."""

from __future__ import annotations

import re
from collections.abc import Iterator

PIECE_OCCURRENCES = 256  # special tokens per piece (llama.cpp's scan stays cheap below this)
MIN_SPLIT_CHARS = 8192  # shorter texts go to llama.cpp whole


class SpecialSplitter:
    def __init__(self, specials: list[str], lstrip: list[str] = ()) -> None:
        """`specials`: the texts llama.cpp matches as special tokens; `lstrip`: those
        of them that strip the blanks before them."""
        texts = sorted({t for t in specials if t}, key=len, reverse=True)
        self._texts = frozenset(texts)
        self._lstrip = frozenset(lstrip)
        self._lengths = sorted({len(t) for t in texts})
        self._pattern = re.compile("|".join(map(re.escape, texts))) if texts else None

    def pieces(self, text: str) -> list[str]:
        """`text` cut at safe boundaries about every PIECE_OCCURRENCES special tokens
        (one piece when it is short or holds few of them)."""
        if self._pattern is None or len(text) < MIN_SPLIT_CHARS:
            return [text]
        cuts = list(self._cuts(text))
        if not cuts:
            return [text]
        bounds = [0, *cuts, len(text)]
        return [text[a:b] for a, b in zip(bounds, bounds[1:])]

    def _cuts(self, text: str) -> Iterator[int]:
        seen = 0
        for match in self._pattern.finditer(text):
            seen += 1
            p = match.start()
            if seen >= PIECE_OCCURRENCES and self._safe(text, p):
                seen = 0
                yield p

    def _safe(self, text: str, p: int) -> bool:
        if p == 0:
            return False
        longest = self._lengths[-1]
        if text[p - 1].isspace() and any(text[p:p + n] in self._lstrip for n in self._lengths):
            return False
        for start in range(max(0, p - longest + 1), p):
            for length in self._lengths:
                end = start + length
                if end > p and end <= len(text) and text[start:end] in self._texts:
                    return False  # an occurrence crosses p
        return True
