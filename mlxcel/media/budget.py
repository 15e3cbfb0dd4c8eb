"""A process-wide bound on decoded media in memory. A 20 MiB PNG can decode to 100 MiB
of pixels, and requests wait with their decoded media until the projector has taken
them; without a bound, a burst of large images is an out-of-memory crash. Each request
takes from the budget as it decodes (image and frame sizes are known from the header,
before decoding) and gives everything back when its media stage ends."""

from __future__ import annotations

import threading

from mlxcel.media.types import MediaError

MIB = 1 << 20


class DecodedBudget:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._lock = threading.Lock()

    def lease(self) -> BudgetLease:
        return BudgetLease(self)

    def _take(self, lease: BudgetLease, n: int, where: str) -> None:
        with self._lock:
            if lease.closed:
                raise MediaError(f"{where}: the request's media load was abandoned", "media_cancelled")
            if lease.held + n > self.capacity:
                raise MediaError(f"{where}: the request's decoded media would take more than the "
                                 f"{self.capacity // MIB} MiB the server allows (--media-memory)",
                                 "media_too_large", 413)
            if self.used + n > self.capacity:
                raise MediaError(f"{where}: the server is decoding as much media as it allows "
                                 f"({self.capacity // MIB} MiB, --media-memory); retry shortly",
                                 "media_busy", 503)
            self.used += n
            lease.held += n

    def _release(self, lease: BudgetLease) -> None:
        with self._lock:
            self.used -= lease.held
            lease.held = 0
            lease.closed = True


class BudgetLease:
    """One request's share of the budget; `release` (idempotent) gives it back and
    closes the lease, so a part still decoding after its request gave up takes nothing."""

    def __init__(self, budget: DecodedBudget) -> None:
        self.budget = budget
        self.held = 0
        self.closed = False

    def take(self, n: int, where: str) -> None:
        self.budget._take(self, n, where)  # noqa: SLF001 - the lease is the budget's own handle

    def release(self) -> None:
        self.budget._release(self)  # noqa: SLF001
