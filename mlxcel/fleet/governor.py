"""The memory governor: a band from how much memory is left, and what the server does
about it. On llama.cpp "memory" is host RAM (mlxcel.engine.host_memory) plus the residency
budget the fleet accounts against (weights of the resident models and the KV their
requests hold: `held_bytes` per model, which the caller sums into `used_bytes`).
A monitor calls `check(host, used_bytes, live requests)` a few times a second: it
observes, and in the red band returns the request to shed.

Bands. Three pressures are classified, and the worst wins:

    band     host free (available/total)   budget use (used/budget)   floor (available)
    green    >= 0.20                       < 0.80                     >= 2 x floor
    yellow   <  0.20                       >= 0.80                    -
    orange   <  0.10                       >= 0.90                    < 2 x floor
    red      <  0.05                       >= 0.95                    < floor

Without a budget only the host and the floor count. A band worsens at once and eases
only when the easier band still holds with a margin (HYSTERESIS: 0.02 on both
fractions, floor comparisons at 1.1 x), so it does not flap around a threshold.

What the bands do (the callers act; the governor decides):
- yellow: the capacity plan counts at most one free slot (mlxcel.fleet.capacity).
- orange and red: new model loads defer (`should_defer_load`), /health?ready=1 says
  `pressure`, the plan's admit_now is false.
- red: `pick_shed` names the request holding the most KV tokens, which the caller
  ends with finish_reason "shed" (server_overloaded_shed); at most one shed per
  SHED_COOLDOWN_S, so the memory the last one freed is seen before the next.

MLXCEL_GOVERNOR=0 disables it: the band is still observed and reported, but the
effective band is green, nothing defers and nothing is shed. Tests force a band with
`force(band)` or MLXCEL_GOVERNOR_BAND=<band> (or configure a budget small enough)."""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from mlxcel.engine.host_memory import HostMemory
from mlxcel.engine.snapshot import EngineSnapshot

GOVERNOR_ENV = "MLXCEL_GOVERNOR"
FORCE_BAND_ENV = "MLXCEL_GOVERNOR_BAND"  # tests only: start with this band forced

HOST_FREE = (0.20, 0.10, 0.05)  # host free fraction below these: yellow, orange, red
BUDGET_USE = (0.80, 0.90, 0.95)  # budget use fraction at or above these: yellow, orange, red
HYSTERESIS = 0.02
FLOOR_EASE = 1.1
DEFAULT_FLOOR_BYTES = 512 * 1024 * 1024  # memory a load must leave free
SHED_COOLDOWN_S = 1.0


class Band(str, enum.Enum):
    GREEN = "green"
    YELLOW = "yellow"
    ORANGE = "orange"
    RED = "red"

    @property
    def rank(self) -> int:
        return list(Band).index(self)

    @property
    def pressure(self) -> bool:
        """orange or red: loads defer, readiness fails, nothing new is admitted now."""
        return self.rank >= Band.ORANGE.rank


class SheddableRequest(Protocol):
    request_id: int
    kv_tokens: int  # tokens its sequence holds (prompt and generated)


R = TypeVar("R", bound=SheddableRequest)


@dataclass(frozen=True)
class LiveRequest:
    """A request the governor may shed (any object with these attributes will do)."""

    request_id: int
    kv_tokens: int
    model: str | None = None


def live_requests(model: str, snapshot: EngineSnapshot) -> list[LiveRequest]:
    """The requests in `snapshot`'s slots, as pick_shed candidates (queued ones hold no KV)."""
    return [LiveRequest(slot.request_id, slot.n_cached, model) for slot in snapshot.slots if slot.busy]


def held_bytes(weights_bytes: int, kv_bytes_per_token: int, snapshot: EngineSnapshot | None) -> int:
    """What one resident model holds for the budget's use: its weights plus the KV of
    the tokens its running requests hold (llama.cpp allocates the whole KV cache at
    load, so this counts what requests use, which is what a shed gives back)."""
    if snapshot is None:
        return weights_bytes
    return weights_bytes + kv_bytes_per_token * sum(slot.n_cached for slot in snapshot.slots if slot.busy)


def governor_enabled() -> bool:
    return os.environ.get(GOVERNOR_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def _by_rank(rank: int) -> Band:
    return list(Band)[rank]


def classify(host: HostMemory | None, used_bytes: int | None, budget_bytes: int | None, floor_bytes: int,
             margin: float = 0.0, floor_scale: float = 1.0) -> Band:
    """The band these numbers give (a positive margin and floor_scale > 1 ask for a
    band that holds with room to spare, as easing does)."""
    rank = 0
    if host is not None and host.total_bytes > 0:
        free = host.available_bytes / host.total_bytes - margin
        rank = max(rank, sum(1 for threshold in HOST_FREE if free < threshold))
        available = host.available_bytes / floor_scale
        if available < floor_bytes:
            rank = max(rank, Band.RED.rank)
        elif available < 2 * floor_bytes:
            rank = max(rank, Band.ORANGE.rank)
    if budget_bytes and used_bytes is not None:
        use = used_bytes / budget_bytes + margin
        rank = max(rank, sum(1 for threshold in BUDGET_USE if use >= threshold))
    return _by_rank(rank)


class MemoryGovernor:
    def __init__(self, budget_bytes: int | None, floor_bytes: int = DEFAULT_FLOOR_BYTES,
                 enabled: bool | None = None, clock: Callable[[], float] = time.time) -> None:
        self.budget_bytes = budget_bytes
        self.floor_bytes = floor_bytes
        self.enabled = governor_enabled() if enabled is None else enabled
        self._clock = clock
        self.observed = Band.GREEN  # what the last observation classified (with hysteresis)
        self.forced: Band | None = None
        forced = os.environ.get(FORCE_BAND_ENV, "").strip().lower()
        if forced:
            self.forced = Band(forced)
        self.used_bytes: int | None = None
        self.band_changes = 0
        self.band_since = clock()
        self.sheds = 0
        self.last_shed: dict | None = None
        self.deferred_loads = 0
        self._last_band = self.band

    @property
    def band(self) -> Band:
        """The band everything acts on: forced, else observed; green when disabled."""
        if not self.enabled:
            return Band.GREEN
        return self.forced if self.forced is not None else self.observed

    def force(self, band: Band | str | None) -> None:
        """Tests: hold the band at `band` (None: back to observing)."""
        self.forced = Band(band) if band is not None else None
        self._note_change()

    def observe(self, host: HostMemory | None, used_bytes: int | None) -> Band:
        """Classify a fresh reading (either may be None when unknown); returns `band`."""
        self.used_bytes = used_bytes
        worse = classify(host, used_bytes, self.budget_bytes, self.floor_bytes)
        if worse.rank >= self.observed.rank:
            self.observed = worse
        else:  # easing: only as far as holds with the margin
            eased = classify(host, used_bytes, self.budget_bytes, self.floor_bytes, HYSTERESIS, FLOOR_EASE)
            if eased.rank < self.observed.rank:
                self.observed = eased
        self._note_change()
        return self.band

    def _note_change(self) -> None:
        band = self.band
        if band is not self._last_band:
            self._last_band = band
            self.band_changes += 1
            self.band_since = self._clock()

    def should_defer_load(self, need_bytes: int, held_bytes: int = 0, host: HostMemory | None = None) -> str | None:
        """Why a load of `need_bytes` must wait, or None when it may go ahead.
        `held_bytes`: what the pinned or busy models hold (what no eviction can free);
        `host`: a fresh reading. Each refusal counts in `deferred_loads`."""
        if not self.enabled:
            return None
        reason = None
        band = self.band
        if band.pressure:
            reason = f"memory pressure (governor {band.value})"
        elif self.budget_bytes and held_bytes + need_bytes > self.budget_bytes:
            reason = (f"loading needs {need_bytes} bytes and the pinned or busy models hold {held_bytes} "
                      f"of the {self.budget_bytes}-byte budget")
        elif host is not None and host.available_bytes - need_bytes < self.floor_bytes:
            reason = (f"loading needs {need_bytes} bytes, {host.available_bytes} bytes are available "
                      f"and {self.floor_bytes} must stay free")
        if reason is not None:
            self.deferred_loads += 1
        return reason

    def pick_shed(self, requests: Iterable[R]) -> R | None:
        """In the red band, the request holding the most KV tokens (the most recent on a
        tie: it has the least work to lose); None otherwise or within the cooldown."""
        if self.band is not Band.RED:
            return None
        if self.last_shed is not None and self._clock() - self.last_shed["at"] < SHED_COOLDOWN_S:
            return None
        return max(requests, key=lambda r: (r.kv_tokens, r.request_id), default=None)

    def check(self, host: HostMemory | None, used_bytes: int | None, requests: Iterable[R]) -> R | None:
        """One tick of the caller's monitor: observe, then the request to shed now (already
        recorded), if any; the caller ends it (Engine.shed)."""
        self.observe(host, used_bytes)
        victim = self.pick_shed(requests)
        if victim is not None:
            self.record_shed(victim)
        return victim

    def record_shed(self, request: SheddableRequest, model: str | None = None) -> None:
        self.sheds += 1
        self.last_shed = {
            "request_id": request.request_id,
            "model": model if model is not None else getattr(request, "model", None),
            "kv_tokens": request.kv_tokens,
            "band": self.band.value,
            "at": self._clock(),
        }

    def snapshot(self) -> dict:
        return {
            "enabled": self.enabled,
            "band": self.band.value,
            "observed_band": self.observed.value,
            "forced": self.forced.value if self.forced is not None else None,
            "band_since": self.band_since,
            "band_changes": self.band_changes,
            "sheds": self.sheds,
            "last_shed": dict(self.last_shed) if self.last_shed is not None else None,
            "deferred_loads": self.deferred_loads,
            "budget_bytes": self.budget_bytes,
            "used_bytes": self.used_bytes,
            "floor_bytes": self.floor_bytes,
        }
