"""Holding back text that may be the start of a marker split across tokens."""

from __future__ import annotations

from collections.abc import Iterable


def partial_marker_length(text: str, markers: Iterable[str]) -> int:
    """Length of the longest end of `text` that is a proper prefix of some marker:
    that much must be held back until the next piece shows whether it is a marker."""
    longest = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:k]):
                longest = k
                break
    return longest


def find_first(text: str, markers: Iterable[str], start: int = 0) -> tuple[int, str | None]:
    """The earliest occurrence of any marker at or after `start`: (index, marker),
    or (-1, None)."""
    best, found = -1, None
    for marker in markers:
        i = text.find(marker, start)
        if i >= 0 and (best < 0 or i < best or (i == best and len(marker) > len(found))):
            best, found = i, marker
    return best, found
