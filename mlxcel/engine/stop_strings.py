"""Stop strings over streamed text: a partial match at the end is held back until
it either completes (generation stops, the stop string is not emitted) or fails
(the held text is released)."""

from __future__ import annotations


class StopStringMatcher:
    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self._held = ""

    def feed(self, text: str) -> tuple[str, str | None]:
        """Returns (text safe to emit, the stop string that matched or None)."""
        if not self.stops:
            return text, None
        buf = self._held + text
        hit_at, hit = -1, None
        for stop in self.stops:
            i = buf.find(stop)
            if i >= 0 and (hit is None or i < hit_at):
                hit_at, hit = i, stop
        if hit is not None:
            self._held = ""
            return buf[:hit_at], hit
        keep = self._partial_suffix(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], None

    def _partial_suffix(self, buf: str) -> int:
        """Length of the longest end of `buf` that begins some stop string."""
        longest = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(buf)), longest, -1):
                if buf.endswith(stop[:k]):
                    longest = k
                    break
        return longest

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held
