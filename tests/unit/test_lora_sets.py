"""Per-request LoRA scales in the engine (lora_sets.py): a step decodes one set's
slots and the sets take turns; a slot's prefix, a busy slot's copy and the host
cache's states are only reused under the scales they were computed with."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest

from mlxcel.engine.draft_choice import DraftChooser
from mlxcel.engine.lora import LoraAdapter
from mlxcel.engine.lora_sets import TURN_S, LoraChange, LoraSets, cache_salt
from mlxcel.engine.prompt_cache import HostPromptCache
from mlxcel.engine.request import GenerationRequest
from mlxcel.engine.slot_memory import SlotMemory
from mlxcel.engine.slots import SlotState, SlotTable
from mlxcel.engine.step_plan import StepPlanner


class Runtime:
    """What LoraSets and SlotMemory reach of a llama runtime, recorded."""

    def __init__(self, *scales: float) -> None:
        self.loras = [LoraAdapter(f"/a{i}.gguf", s, None) for i, s in enumerate(scales)]
        self.ctx = None
        self.kv_unified = False
        self.calls: list[tuple] = []

    def seq_clear(self, seq_id):
        self.calls.append(("clear", seq_id))

    def seq_remove(self, seq_id, p0, p1):
        self.calls.append(("remove", seq_id, p0))
        return True

    def copy_seq(self, src, dst):
        self.calls.append(("copy", src, dst))

    def seq_state(self, seq_id):
        return np.zeros(8, dtype=np.uint8)

    def restore_seq_state(self, seq_id, state):
        self.calls.append(("restore", seq_id))
        return True


def _running(slots: SlotTable, slot_id: int, lora: tuple, tokens: list[int], state=SlotState.DECODE):
    slot = slots.slots[slot_id]
    slot.request = GenerationRequest(prompt_tokens=list(tokens), emit=lambda event: None)
    slot.state, slot.lora, slot.cached_tokens, slot.next_token = state, lora, list(tokens), 7
    return slot


def test_the_sets_take_turns_and_one_set_needs_no_turns():
    now = [0.0]
    sets, slots = LoraSets(Runtime(1.0), clock=lambda: now[0]), SlotTable(4)
    _running(slots, 0, (1.0,), [1])
    _running(slots, 1, (1.0,), [1])
    assert sets.step_set(slots) is None  # one set: every slot, every step
    _running(slots, 2, (0.5,), [1])
    _running(slots, 3, (0.0,), [1], SlotState.PREFILL)
    turns = []
    for _ in range(4 * 8):  # steps of TURN_S / 8
        turns.append(sets.step_set(slots))
        now[0] += TURN_S / 8 + 1e-9
    assert turns == [s for s in [(0.0,), (0.5,), (1.0,), (0.0,)] for _ in range(8)]
    slots.slots[3].release()  # (0.0,)'s only slot ends its turn early
    assert sets.step_set(slots) == (0.5,)


def test_a_set_that_arrives_while_another_runs_gets_the_next_step():
    now = [0.0]
    sets, slots = LoraSets(Runtime(1.0), clock=lambda: now[0]), SlotTable(3)
    _running(slots, 0, (1.0,), [1])
    for _ in range(5):
        assert sets.step_set(slots) is None
        now[0] += 0.01
    _running(slots, 1, (2.0,), [1], SlotState.PREFILL)  # sorts after the running set, and goes first
    assert sets.step_set(slots) == (2.0,)
    now[0] += TURN_S + 0.01
    _running(slots, 2, (0.5,), [1], SlotState.PREFILL)  # never served: ahead of (1.0,), which waited since
    assert sets.step_set(slots) == (0.5,)
    now[0] += TURN_S + 0.01
    assert sets.step_set(slots) == (1.0,)
    assert LoraSets(Runtime()).step_set(slots) is None  # no adapters: never a turn


def test_a_step_takes_only_its_sets_slots():
    slots = SlotTable(4)
    planner = StepPlanner(slots, 64, DraftChooser(None, 0, 0, None, 64, 256, 64), prefill_chunk=32,
                          n_ctx_slot=256, split_kv=True, n_ubatch=64, sizes_drafts_together=False,
                          shift_context=None, request_failed=lambda *args: None)
    _running(slots, 0, (1.0,), [1, 2])
    _running(slots, 1, (0.5,), [1, 2])
    prefilling = _running(slots, 2, (0.5,), [], SlotState.PREFILL)
    prefilling.request.prompt_tokens = [4, 5, 6]
    planner.lora = (0.5,)
    assert [(span.slot.id, span.prefill) for span in planner.plan()] == [(1, False), (2, True)]
    planner.lora = (1.0,)
    assert [span.slot.id for span in planner.plan()] == [0]
    planner.lora = None
    assert [span.slot.id for span in planner.plan()] == [0, 1, 2]


def test_the_change_is_the_servers_and_a_decode_sets_the_context_only_on_a_change(monkeypatch):
    runtime = Runtime(1.0, 0.0)
    applied = []
    monkeypatch.setattr("mlxcel.engine.lora_sets.apply_scales", lambda ctx, adapters, scales: applied.append(scales))
    sets = LoraSets(runtime)
    assert sets.of(None) == (1.0, 0.0) and sets.of((0.0, 2.0)) == (0.0, 2.0)
    sets.use((1.0, 0.0))
    assert applied == []  # as loaded
    sets.use((0.0, 2.0)), sets.use((0.0, 2.0)), sets.use((1.0, 0.0))
    assert applied == [[0.0, 2.0], [1.0, 0.0]]
    change = LoraChange([0.25, 0.0], Future())
    sets.change(change)
    assert change.done.result(0) is None and sets.of(None) == (0.25, 0.0) and runtime.loras[0].scale == 0.25
    bad = LoraChange([1.0], Future())
    sets.change(bad)
    with pytest.raises(ValueError):
        bad.done.result(0)


def test_a_slots_prefix_is_shared_only_under_its_own_scales():
    slots = SlotTable(2)
    prompt = list(range(40))
    slots.slots[0].cached_tokens, slots.slots[0].lora = list(prompt[:30]), (1.0,)
    slots.slots[1].cached_tokens, slots.slots[1].lora = list(prompt[:10]), (0.5,)
    slot, n = slots.choose(prompt, True, lora=(0.5,))
    assert (slot.id, n) == (1, 10)
    slot, n = slots.choose(prompt, True, lora=(1.0,))
    assert (slot.id, n) == (0, 30)
    assert slots.choose(prompt, True, lora=(0.0,))[1] == 0


def test_the_host_cache_keys_states_by_their_scales():
    cache = HostPromptCache(1 << 20, 8, 0)
    tokens = list(range(48))
    cache.insert(tokens, b"a" * 10, salt=cache_salt((1.0,)))
    assert cache.lookup(tokens, cache_salt((0.5,))) is None and cache.lookup(tokens) is None
    assert cache.covered(tokens, cache_salt((1.0,))) == 48 and cache.covered(tokens) == 0
    cache.insert(tokens, b"b" * 10, salt=cache_salt((0.5,)))  # the same tokens, another set: both kept
    assert cache.lookup(tokens, cache_salt((1.0,)))[0].state == b"a" * 10
    assert cache.lookup(tokens, cache_salt((0.5,)))[0].state == b"b" * 10
    assert cache.stats()["entries"] == 2 and cache.stats()["superseded"] == 0
    assert cache_salt((0.0, 0.0)) == cache_salt(()) == b""  # no adapter applied: the bare model's key


def test_admission_copies_and_restores_only_states_of_its_scales():
    runtime = Runtime(1.0)
    cache = HostPromptCache(1 << 20, 8, 0)
    memory = SlotMemory(runtime, cache)
    slots = SlotTable(3)
    prompt = list(range(100))
    _running(slots, 0, (1.0,), prompt[:80])  # a busy slot holding most of the prompt, under 1.0
    cache.insert(prompt[:64], np.zeros(4, dtype=np.uint8), salt=cache_salt((1.0,)))
    target = slots.slots[1]
    memory.admit(target, prompt, 0, True, [slots.slots[0]], lora=(0.5,))
    assert target.lora == (0.5,) and target.cached_tokens == [] and not any(c[0] in ("copy", "restore")
                                                                            for c in runtime.calls)
    memory.admit(target, prompt, 0, True, [slots.slots[0]], lora=(1.0,))
    assert target.cached_tokens == prompt[:80] and ("copy", 0, 1) in runtime.calls
    # an idle slot's tokens go to the host cache under the scales they were computed with
    donor = slots.slots[2]
    donor.cached_tokens, donor.lora, donor.unsaved = list(range(500, 564)), (0.5,), True
    memory.save_one_idle(slots)
    assert cache.covered(list(range(500, 564)), cache_salt((0.5,))) == 64
    assert cache.covered(list(range(500, 564)), cache_salt((1.0,))) == 0
