"""How long until the queue drains: what Retry-After carries on a queue-cap 503 and on
/health?ready=1, and /v1/metrics' queue.eta_s. The waiting requests, each the recent
mean output length, at the measured per-stream decode rate times the streams running
(DEFAULT_ETA_S a request while nothing is measured); 003 clamps it to 2..60 seconds."""

from __future__ import annotations

import math
from collections.abc import Iterable

from mlxcel.engine.rates import combine, rates_of
from mlxcel.engine.snapshot import EngineSnapshot

ETA_MIN_S = 2
ETA_MAX_S = 60
DEFAULT_ETA_S = 5  # per waiting request, before any rate is measured


def finishing_time(ahead: int, in_flight: int, decode_tok_s: float | None, mean_generated: float | None) -> float:
    """Seconds for `ahead` requests to finish at the measured rates."""
    if ahead <= 0:
        return 0.0
    if not decode_tok_s or decode_tok_s <= 0 or not mean_generated or mean_generated <= 0:
        return float(DEFAULT_ETA_S * ahead)
    return ahead * mean_generated / (decode_tok_s * max(in_flight, 1))


def drain_eta_s(waiting: int, in_flight: int, decode_tok_s: float | None, mean_generated: float | None) -> int:
    eta = finishing_time(waiting, in_flight, decode_tok_s, mean_generated)
    return int(min(ETA_MAX_S, max(ETA_MIN_S, math.ceil(eta))))


def retry_after_s(snapshots: Iterable[EngineSnapshot]) -> int:
    """drain_eta_s over these engines' published figures."""
    snapshots = list(snapshots)
    rates = combine(rates_of(s) for s in snapshots)
    return drain_eta_s(sum(s.queue_depth for s in snapshots), sum(s.n_busy for s in snapshots),
                       rates.decode_tok_s_recent, rates.mean_generated_recent)
