"""Progress reporting for pulls: a small text bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Protocol, TextIO


class Reporter(Protocol):
    """Receives the phases of a pull and the bytes processed within each."""

    def phase(self, message: str, total: int | None = None) -> None:
        """A new phase begins; ``total`` is its size in bytes when known."""

    def advance(self, nbytes: int) -> None:
        """``nbytes`` more bytes of the current phase are done."""

    def close(self) -> None:
        """The pull is over (successfully or not)."""


class LineReporter:
    """One line per phase through ``log``; byte counts are not shown."""

    def __init__(self, log: Callable[[str], object] = print) -> None:
        self._log = log

    def phase(self, message: str, total: int | None = None) -> None:
        self._log(message)

    def advance(self, nbytes: int) -> None:
        pass

    def close(self) -> None:
        pass


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f}"


class BarReporter:
    """A one-line bar redrawn in place with ``\\r``, e.g. ``label [####....] 42% 41.3/98.4 MB``."""

    def __init__(self, stream: TextIO | None = None, width: int = 30, interval: float = 0.1) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._width = width
        self._interval = interval
        self._label = ""
        self._total: int | None = None
        self._done = 0
        self._open = False
        self._last_draw = 0.0

    def phase(self, message: str, total: int | None = None) -> None:
        self._end_line()
        self._label, self._total, self._done = message, total, 0
        self._draw(force=True)

    def advance(self, nbytes: int) -> None:
        self._done += nbytes
        finished = self._total is not None and self._done >= self._total
        self._draw(force=finished)

    def close(self) -> None:
        self._end_line()

    def render(self) -> str:
        """The current line, without the leading carriage return."""
        if not self._total:
            return f"{self._label} ..."
        fraction = min(self._done / self._total, 1.0)
        filled = int(fraction * self._width)
        bar = "#" * filled + "." * (self._width - filled)
        return (
            f"{self._label} [{bar}] {fraction * 100:3.0f}% "
            f"{_mb(self._done)}/{_mb(self._total)} MB"
        )

    def _draw(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < self._interval:
            return
        self._last_draw = now
        self._stream.write("\r" + self.render() + "\x1b[K")
        self._stream.flush()
        self._open = True

    def _end_line(self) -> None:
        if self._open:
            self._stream.write("\n")
            self._stream.flush()
            self._open = False


def make_reporter(
    progress: Reporter | bool | None, log: Callable[[str], object] = print
) -> Reporter:
    """Pick a reporter: given one, use it; True → bar; False → lines; None → bar on a TTY."""
    if progress is None:
        progress = sys.stderr.isatty()
    if progress is True:
        return BarReporter(sys.stderr)
    if progress is False:
        return LineReporter(log)
    return progress
