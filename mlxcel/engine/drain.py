"""How long until the queue drains: what Retry-After carries on a queue-cap 503 and on
/health?ready=1. Each engine's waiting requests times its mean request time, spread
over its slots; 003 clamps the answer to 2..60 seconds."""

from __future__ import annotations

import math
from collections.abc import Iterable

from mlxcel.engine.snapshot import EngineSnapshot

MIN_S, MAX_S = 2, 60
DEFAULT_REQUEST_S = 5.0  # before any request finished


def drain_eta_s(snapshots: Iterable[EngineSnapshot]) -> int:
    longest = 0.0
    for snapshot in snapshots:
        stats = snapshot.stats
        per_request = (stats.generation_seconds / stats.requests_completed if stats.requests_completed
                       else DEFAULT_REQUEST_S)
        width = max(1, len(snapshot.slots))
        longest = max(longest, (snapshot.queue_depth + snapshot.n_busy) * per_request / width)
    return int(min(MAX_S, max(MIN_S, math.ceil(longest))))
