"""Whether an engine woken from idle waits for the rest of a burst.

Requests sent together reach an idle engine a little apart (the event loop hands them
over one by one). Prefilled alone, the first keeps the others waiting a whole prefill,
so after a wake the engine waits a few milliseconds for each next one (engine.py's
BURST_WAIT_S). A lone client pays that wait on every request's first token and gains
nothing from it. So the wait is kept while bursts come: after `quiet_wakes` wakes in a
row on which no second request came, the engine starts at once; a request arriving
within the burst window of a wake it did not wait on, while that wake's work still runs
(a burst the engine missed), turns the wait back on.
"""

from __future__ import annotations

QUIET_WAKES = 32  # lone wakes in a row before the engine stops waiting for bursts


class BurstWatch:
    def __init__(self, quiet_wakes: int = QUIET_WAKES) -> None:
        self.quiet_wakes = quiet_wakes
        self.quiet = 0  # wakes in a row on which no second request came
        self._unwaited_wake: float | None = None  # when the engine last woke without waiting

    @property
    def waits(self) -> bool:
        """Whether the next wake from idle should wait for the rest of a burst."""
        return self.quiet < self.quiet_wakes

    def woke(self, now: float, waited: bool, queued: int) -> None:
        """A wake from idle: whether it waited, and how many requests wait for its first
        turn (none when the one that woke it was cancelled meanwhile)."""
        self.quiet = 0 if queued > 1 else self.quiet + 1
        self._unwaited_wake = None if waited else now

    def arrived_busy(self, now: float, window: float) -> None:
        """A request came while the engine was busy: within `window` of a wake that did
        not wait, it is a burst the wait would have gathered."""
        if self._unwaited_wake is not None and now - self._unwaited_wake <= window:
            self.quiet = 0
            self._unwaited_wake = None
