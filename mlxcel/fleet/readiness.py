"""/health?ready=1's verdict and the queue-cap counters behind /v1/metrics' `queue`.

readiness: 200 `ready: true`, or 503 with one word and a Retry-After, the first that
applies of:
- pressure: the governor's (effective) band is orange or red;
- queue: requests are waiting for a slot;
- busy: every resident engine is at its decode width (no free slot anywhere; with no
  model resident nothing is busy: a request would load one).
Retry-After is the drain estimate (mlxcel.engine.drain.drain_eta_s, 2..60 s)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Readiness:
    ready: bool
    reason: str | None = None  # pressure | queue | busy
    retry_after: int | None = None

    def to_dict(self) -> dict:
        return {"ready": True} if self.ready else {"ready": False, "reason": self.reason}


def readiness(band: str, waiting: int, free_slots: list[int], eta_s: int) -> Readiness:
    """`free_slots`: each resident engine's idle slots."""
    band = getattr(band, "value", band)
    if band in ("orange", "red"):
        reason = "pressure"
    elif waiting > 0:
        reason = "queue"
    elif free_slots and not any(free_slots):
        reason = "busy"
    else:
        return Readiness(True)
    return Readiness(False, reason, eta_s)


@dataclass
class QueueCounters:
    """Queue-cap rejections (config mode's server_overloaded, single-model mode's
    server_busy), counted where the request is refused."""

    cap: int | None = None  # None: the sum of the resident models' caps
    rejections: int = 0
    last_reject_reason: str | None = None
    last_reject_at: float | None = None  # time.time()
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def reject(self, reason: str) -> None:
        with self._lock:
            self.rejections += 1
            self.last_reject_reason = reason
            self.last_reject_at = time.time()
