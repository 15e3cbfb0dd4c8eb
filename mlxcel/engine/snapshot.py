"""What the engine publishes for HTTP readers (/health, /slots, /metrics): an
immutable picture of its slots, queue and counters, replaced whole by the engine
thread when a request enters or leaves a slot or the queue (before its client hears
of it), when it goes idle, and a few times a second for the counters while busy.
Readers never touch live slots.

Times are time.monotonic() readings (compare them with `taken_at`)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from mlxcel.engine.prefill_queue import PrefillQueue
from mlxcel.engine.slot_task import SlotTask, prompt_processed
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
    # the running request (zeros when idle)
    created: float = 0.0  # when the request was built (its queue wait starts there)
    admitted_at: float = 0.0  # when the slot took it
    first_token_at: float = 0.0  # 0 until its first token
    max_tokens: int = -1
    n_reused: int = 0  # prompt tokens reused (the warm prefix)
    cache_tier: str = "miss"  # where they came from: slot, exact, block or miss
    draft_rounds: int = 0
    draft_n: int = 0
    draft_accepted: int = 0
    lora: tuple[float, ...] = ()  # the LoRA scales its sequence holds (a scale per adapter)
    task: SlotTask | None = None  # the request it runs, or last ran
    n_prompt_processed: int = 0  # the running request's prompt tokens prefilled so far

    @property
    def busy(self) -> bool:
        return self.state is not SlotState.IDLE


@dataclass(frozen=True)
class QueuedView:
    """A request waiting for a slot."""

    request_id: int
    n_prompt_tokens: int
    max_tokens: int
    created: float
    priority: int


@dataclass(frozen=True)
class EngineSnapshot:
    slots: tuple[SlotView, ...] = ()
    queue_depth: int = 0
    stats: EngineStats = field(default_factory=EngineStats)
    taken_at: float = 0.0
    queued: tuple[QueuedView, ...] = ()  # in the order they would be served
    speculative: bool = False  # the engine drafts (a draft model or prompt lookup)

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


def _slot_view(slot) -> SlotView:
    request = slot.request
    if request is None:
        return SlotView(slot.id, slot.state, -1, 0, 0, len(slot.cached_tokens), lora=slot.lora, task=slot.task)
    return SlotView(
        id=slot.id,
        state=slot.state,
        request_id=request.id,
        n_prompt_tokens=len(request.prompt_tokens),
        n_decoded=slot.n_generated,
        n_cached=len(slot.cached_tokens),
        created=request.created,
        admitted_at=slot.admitted_at,
        first_token_at=slot.first_token_at,
        max_tokens=request.max_tokens,
        n_reused=slot.n_reused,
        cache_tier=slot.cache_tier,
        draft_rounds=slot.draft_rounds,
        draft_n=slot.draft_n,
        draft_accepted=slot.draft_accepted,
        lora=slot.lora,
        task=slot.task,
        n_prompt_processed=prompt_processed(len(slot.cached_tokens), len(request.prompt_tokens), slot.n_reused),
    )


def take_snapshot(slots: SlotTable, outstanding: int, stats: EngineStats, waiting: PrefillQueue | None = None,
                  speculative: bool = False) -> EngineSnapshot:
    views = tuple(_slot_view(slot) for slot in slots)
    queued = tuple(
        QueuedView(r.id, len(r.prompt_tokens), r.max_tokens, r.created, int(r.priority))
        for r in (waiting.ordered() if waiting is not None else ())
    )
    busy = sum(1 for view in views if view.busy)
    return EngineSnapshot(views, max(0, outstanding - busy), dataclasses.replace(stats), time.monotonic(), queued,
                          speculative)
