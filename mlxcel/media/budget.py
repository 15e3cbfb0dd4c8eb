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


class BudgetLease:
    """One request's share of the budget; `release` (idempotent) gives it back and
    closes the lease, so a part still decoding after its request gave up takes nothing."""

    def __init__(self, budget: DecodedBudget) -> None:
        self.budget = budget
        self.held = 0
        self.closed = False

    def take(self, n: int, where: str) -> None:
        budget = self.budget
        with budget._lock:
            if self.closed:
                raise MediaError(f"{where}: the request's media load was abandoned", "media_cancelled")
            if self.held + n > budget.capacity:
                raise MediaError(f"{where}: the request's decoded media would take more than the "
                                 f"{budget.capacity // MIB} MiB the server allows (--media-memory)",
                                 "media_too_large", 413)
            if budget.used + n > budget.capacity:
                raise MediaError(f"{where}: the server is decoding as much media as it allows "
                                 f"({budget.capacity // MIB} MiB, --media-memory); retry shortly",
                                 "media_busy", 503)
            budget.used += n
            self.held += n

    def release(self) -> None:
        with self.budget._lock:
            self.budget.used -= self.held
            self.held = 0
            self.closed = True
