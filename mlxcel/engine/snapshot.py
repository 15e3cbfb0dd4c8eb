"""What the engine publishes for HTTP readers (/health, /slots, /metrics): an
immutable picture of its slots, queue and counters, replaced whole by the engine
thread when a request enters or leaves a slot or the queue (before its client hears
of it), when it goes idle, and a few times a second for the counters while busy.
Readers never touch live slots."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from mlxcel.engine.slots import SlotState, SlotTable
from mlxcel.engine.stats import EngineStats

PUBLISH_INTERVAL_S = 0.1  # counters while busy; admissions, finishes and idleness publish at once


@dataclass(frozen=True)
class SlotView:
    id: int
    state: SlotState
    request_id: int  # -1 when idle
    n_prompt_tokens: int
    n_decoded: int
    n_cached: int  # tokens the slot's sequence holds

    @property
    def busy(self) -> bool:
        return self.state is not SlotState.IDLE


@dataclass(frozen=True)
class EngineSnapshot:
    slots: tuple[SlotView, ...] = ()
    queue_depth: int = 0
    stats: EngineStats = field(default_factory=EngineStats)
    taken_at: float = 0.0

    @property
    def n_busy(self) -> int:
        return sum(1 for s in self.slots if s.busy)

    @property
    def n_idle(self) -> int:
        return len(self.slots) - self.n_busy

    @property
    def n_cached_slots(self) -> int:
        """Slots whose sequence holds tokens (the spec's cache_pool_active)."""
        return sum(1 for s in self.slots if s.n_cached)


def take_snapshot(slots: SlotTable, outstanding: int, stats: EngineStats) -> EngineSnapshot:
    views = tuple(
        SlotView(
            id=slot.id,
            state=slot.state,
            request_id=slot.request.id if slot.request is not None else -1,
            n_prompt_tokens=len(slot.request.prompt_tokens) if slot.request is not None else 0,
            n_decoded=slot.n_generated if slot.request is not None else 0,
            n_cached=len(slot.cached_tokens),
        )
        for slot in slots
    )
    busy = sum(1 for view in views if view.busy)
    return EngineSnapshot(views, max(0, outstanding - busy), dataclasses.replace(stats), time.monotonic())
