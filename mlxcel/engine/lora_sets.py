"""The LoRA scales each request runs with, and each step's (llama-server's per-request
`lora`).

A request runs with the scales its `lora` list asks for, or the server's (--lora,
--lora-scaled, changed by POST /lora-adapters) at its admission. llama.cpp decodes a
batch under one set of scales, so a step takes the slots of one set; while slots of
several sets are busy, the sets take turns of TURN_S seconds, so none waits for
another's requests to finish. A turn is that long because a change of scales makes
llama.cpp plan its compute graph again on the next decode (10 ms on SmolLM2 on 2
cores, a step and a half: alternating every step served 0.63 of what the same two
requests got with one set); a turn of TURN_S keeps that near 3 % of the time on any
model, at the price of up to TURN_S more before another set's first token.

A slot's KV is kept with the set it was computed under (`Slot.lora`): its prefix is
reused or copied only for a request of that set, and the host cache finds a saved
state only for it (`cache_salt`)."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass

from mlxcel.engine.lora import apply_scales
from mlxcel.engine.slots import Slot, SlotState

LoraScales = tuple[float, ...]  # one scale per loaded adapter, in load order; () without adapters
TURN_S = 0.4  # how long a set keeps the context while another set's slots wait


def cache_salt(scales: LoraScales) -> bytes:
    """What the host cache's hash chains start from for KV computed under `scales`:
    nothing for the bare model, so a server without adapters keys as it always has."""
    if not any(scales):
        return b""
    return b"lora:" + struct.pack(f"<{len(scales)}d", *scales)


@dataclass
class LoraChange:
    """POST /lora-adapters: the server's scales from now on (running requests keep theirs)."""

    scales: list[float]
    done: Future  # answered with None once requests admitted after it run with them


class LoraSets:
    """The engine thread's view of the adapters: the server's scales, the ones the
    context runs with now, and whose turn the next step is."""

    def __init__(self, runtime, clock: Callable[[], float] = time.monotonic) -> None:
        self.runtime = runtime
        self.clock = clock
        self.adapters = runtime.loras
        self.applied: LoraScales = tuple(a.scale for a in self.adapters)  # the runtime applied them at load
        self._turn: LoraScales | None = None  # the set whose turn it is, while several are busy
        self._turn_ends = 0.0  # the clock's reading when that turn is over
        self._served_at: dict[LoraScales, float] = {}  # when each busy set last had a step

    @property
    def server(self) -> LoraScales:
        return tuple(a.scale for a in self.adapters)

    def of(self, requested: LoraScales | None) -> LoraScales:
        """The scales a request runs with: its own, or the server's now."""
        return self.server if requested is None else requested

    def change(self, command: LoraChange) -> None:
        if len(command.scales) != len(self.adapters):
            command.done.set_exception(ValueError("one scale per adapter"))
            return
        for adapter, scale in zip(self.adapters, command.scales):
            adapter.scale = scale
        command.done.set_result(None)

    def step_set(self, slots: Iterable[Slot]) -> LoraScales | None:
        """The set this step decodes; None while every busy slot runs the same one (a
        step then takes them all). The sets take turns of TURN_S, the one that waited
        longest next (a set that has had no step yet first); a turn ends early once its
        set has no busy slot."""
        if not self.adapters:
            return None
        sets = sorted({slot.lora for slot in slots if slot.state is not SlotState.IDLE})
        now = self.clock()
        self._served_at = {s: t for s, t in self._served_at.items() if s in sets}  # bounded by the slots
        if len(sets) <= 1:
            self._served_at.update({s: now for s in sets})
            self._turn_ends = now  # a set arriving now gets the next step
            return None
        if not (self._turn in sets and now < self._turn_ends):
            others = [s for s in sets if s != self._turn]
            self._turn = min(others, key=lambda s: self._served_at.get(s, float("-inf")))
            self._turn_ends = now + TURN_S
        self._served_at[self._turn] = now
        return self._turn

    def use(self, scales: LoraScales) -> None:
        """Run the context's next decode with `scales` (llama.cpp re-plans its graph on
        a change, so this is a no-op while they stay)."""
        if self.adapters and scales != self.applied:
            apply_scales(self.runtime.ctx, self.adapters, list(scales))
            self.applied = scales
