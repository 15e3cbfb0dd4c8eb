"""SlotMemory over the fake runtime: what a slot's sequence holds once a request is
admitted into it (its own prefix, one copied from a busy slot, one restored from the
host cache), and what it saves before that memory is overwritten."""

from __future__ import annotations

import time

import numpy as np

from mlxcel.engine.prompt_cache import BLOCK_SIZE, HostPromptCache
from mlxcel.engine.request import GenerationRequest
from mlxcel.engine.slot_memory import SlotMemory
from mlxcel.engine.slots import Slot, SlotTable
from tests.unit.fake_runtime import FakeRuntime

SHARED = list(range(1, 41))  # 40 tokens: more than MIN_GAIN past an empty slot


def holding(runtime: FakeRuntime, slot: Slot, tokens: list[int], *, busy: bool = False, cache_prompt=True) -> Slot:
    """Make `slot` hold `tokens` (and serve a request when `busy`)."""
    runtime.memory[slot.id] = list(tokens)
    slot.cached_tokens = list(tokens)
    if busy:
        slot.request = GenerationRequest(prompt_tokens=list(tokens), emit=lambda e: None, cache_prompt=cache_prompt)
    return slot


def test_the_slots_own_prefix_is_kept_and_the_rest_cut():
    runtime = FakeRuntime(n_parallel=1)
    slot = holding(runtime, SlotTable(1).slots[0], [1, 2, 3, 4, 5, 6])
    SlotMemory(runtime, None).admit(slot, [1, 2, 3, 9], n_common=3, reuse=True)
    assert runtime.memory[0] == slot.cached_tokens == [1, 2, 3]
    assert slot.cache_tier == "slot"


def test_an_identical_prompt_keeps_all_but_its_last_token():
    runtime = FakeRuntime(n_parallel=1)
    slot = holding(runtime, SlotTable(1).slots[0], [1, 2, 3, 4])
    SlotMemory(runtime, None).admit(slot, [1, 2, 3, 4], n_common=4, reuse=True)
    assert runtime.memory[0] == slot.cached_tokens == [1, 2, 3]  # the last is decoded again for its logits


def test_without_reuse_the_sequence_is_emptied():
    runtime = FakeRuntime(n_parallel=1)
    slot = holding(runtime, SlotTable(1).slots[0], [1, 2, 3, 4])
    SlotMemory(runtime, None).admit(slot, [1, 2, 3, 9], n_common=0, reuse=False)
    assert runtime.memory[0] == slot.cached_tokens == []
    assert slot.cache_tier == "miss"


def test_a_longer_prefix_is_copied_from_a_busy_slot():
    runtime = FakeRuntime(n_parallel=2)
    idle, busy = SlotTable(2).slots
    holding(runtime, busy, SHARED + [50, 51], busy=True)
    SlotMemory(runtime, None).admit(idle, SHARED + [60, 61], n_common=0, reuse=True, busy=[busy])
    assert runtime.memory[0] == idle.cached_tokens == SHARED
    assert idle.cache_tier == "slot"
    assert runtime.memory[1] == busy.cached_tokens == SHARED + [50, 51]  # the source keeps its own


def test_no_copy_from_a_request_that_opted_out_or_for_a_small_gain():
    runtime = FakeRuntime(n_parallel=2)
    idle, busy = SlotTable(2).slots
    holding(runtime, busy, SHARED, busy=True, cache_prompt=False)
    SlotMemory(runtime, None).admit(idle, SHARED + [60], n_common=0, reuse=True, busy=[busy])
    assert runtime.memory[0] == idle.cached_tokens == []
    short = SHARED[: BLOCK_SIZE - 1]  # saves fewer prompt tokens than a copy is worth
    holding(runtime, busy, short, busy=True)
    SlotMemory(runtime, None).admit(idle, short + [60], n_common=0, reuse=True, busy=[busy])
    assert runtime.memory[0] == idle.cached_tokens == []


def test_a_prefix_is_restored_from_the_host_cache_and_cut_to_what_is_shared():
    runtime = FakeRuntime(n_parallel=1)
    cache = HostPromptCache(capacity_bytes=1 << 20, max_entries=8, ttl_seconds=0)
    saved = SHARED + [70, 71, 72]
    runtime.memory[0] = saved
    cache.insert(saved, runtime.seq_state(0))  # what an earlier request left in the cache
    runtime.memory[0] = []
    slot = SlotTable(1).slots[0]
    prompt = SHARED[:35] + [80] * 15  # shares 35 tokens, two whole blocks
    SlotMemory(runtime, cache).admit(slot, prompt, n_common=0, reuse=True)
    assert runtime.memory[0] == slot.cached_tokens == SHARED[:35]
    assert slot.cache_tier == "block"  # less than the prompt's whole blocks (48)


def test_an_unsaved_slot_is_saved_to_the_host_cache_before_it_is_overwritten():
    runtime = FakeRuntime(n_parallel=1)
    cache = HostPromptCache(capacity_bytes=1 << 20, max_entries=8, ttl_seconds=0)
    slot = holding(runtime, SlotTable(1).slots[0], SHARED + [90] * 8)
    slot.unsaved = True
    SlotMemory(runtime, cache).admit(slot, [5, 6, 7], n_common=0, reuse=True)
    assert runtime.memory[0] == slot.cached_tokens == [] and not slot.unsaved
    entry, n = cache.lookup(SHARED + [90] * 8)
    assert entry.tokens == SHARED + [90] * 8 and list(entry.state) == entry.tokens and n == 48


def test_a_conversation_a_turn_past_its_saved_entry_is_saved_again_and_supersedes_it():
    # a long history saved at the last eviction; one turn (~6 % of it) later the slot is
    # taken again: re-prefilling that turn would cost far more than saving
    runtime = FakeRuntime(n_parallel=1)
    cache = HostPromptCache(capacity_bytes=1 << 24, max_entries=8, ttl_seconds=0)
    history = list(range(1000, 3400))
    cache.insert(history, np.array(history, dtype=np.int32))
    slot = holding(runtime, SlotTable(1).slots[0], history + list(range(5000, 5150)))
    slot.unsaved = True
    SlotMemory(runtime, cache).admit(slot, history[:100] + [7, 8, 9], n_common=100, reuse=True)
    entry, n = cache.lookup(history + list(range(5000, 5150)) + [1])
    assert n == (2400 + 150) // BLOCK_SIZE * BLOCK_SIZE and len(entry.tokens) == 2550
    assert cache.stats()["entries"] == 1  # the older entry was superseded


def test_a_few_blocks_past_an_entry_are_not_saved_again():
    runtime = FakeRuntime(n_parallel=1)
    cache = HostPromptCache(capacity_bytes=1 << 24, max_entries=8, ttl_seconds=0)
    history = list(range(1000, 1400))
    cache.insert(history, np.array(history, dtype=np.int32))
    slot = holding(runtime, SlotTable(1).slots[0], history + [9] * 20)
    slot.unsaved = True
    SlotMemory(runtime, cache).admit(slot, [5, 6, 7], n_common=0, reuse=True)
    assert cache.lookup(history + [9] * 20)[0].tokens == history


def test_idle_slots_are_saved_one_at_a_time_while_nothing_else_runs():
    runtime = FakeRuntime(n_parallel=2)
    cache = HostPromptCache(capacity_bytes=1 << 20, max_entries=8, ttl_seconds=0)
    table = SlotTable(2)
    for slot, first in zip(table, (100, 200)):
        holding(runtime, slot, list(range(first, first + 40)))
        slot.release()
    memory = SlotMemory(runtime, cache)
    assert memory.has_unsaved(table)
    assert memory.save_one_idle(table) and memory.save_one_idle(table)
    assert not memory.save_one_idle(table) and not memory.has_unsaved(table)
    assert cache.stats()["entries"] == 2
    assert runtime.memory[0] == list(range(100, 140))  # saving copies, the slot keeps its tokens


def test_a_slot_left_by_a_request_that_opted_out_of_caching_is_never_saved():
    runtime = FakeRuntime(n_parallel=2)
    cache = HostPromptCache(capacity_bytes=1 << 20, max_entries=8, ttl_seconds=0)
    table = SlotTable(2)
    opted_out, opted_in = table.slots
    holding(runtime, opted_out, list(range(100, 140)), busy=True, cache_prompt=False).release()
    holding(runtime, opted_in, list(range(200, 240)), busy=True).release()
    memory = SlotMemory(runtime, cache)
    assert memory.save_one_idle(table) and not memory.save_one_idle(table)
    assert cache.lookup(list(range(100, 140))) is None
    assert cache.lookup(list(range(200, 240)))[1] == 32


def test_in_a_unified_pool_the_other_idle_slots_are_saved_and_cleared_before_an_admission():
    runtime = FakeRuntime(n_parallel=4, n_ctx_seq=512, kv_unified=True)
    cache = HostPromptCache(capacity_bytes=1 << 20, max_entries=8, ttl_seconds=0)
    memory = SlotMemory(runtime, cache)
    new, idle, busy, saved = SlotTable(4).slots
    holding(runtime, new, [9] * 40)  # the admitted slot keeps its own: it may share a prefix with the prompt
    holding(runtime, idle, SHARED).unsaved = True
    holding(runtime, busy, [7] * 40, busy=True)
    holding(runtime, saved, [5] * 40)  # already in the host cache: cleared without another copy
    memory.clear_idle(new, [new, idle, busy, saved])
    assert runtime.memory[0] == [9] * 40 and runtime.memory[2] == [7] * 40
    assert runtime.memory[1] == idle.cached_tokens == [] and runtime.memory[3] == saved.cached_tokens == []
    entry, n = cache.lookup(SHARED + [1])
    assert entry.tokens == SHARED and n == 32 and cache.stats()["inserts"] == 1


def test_a_per_slot_pool_never_clears_idle_slots():
    runtime = FakeRuntime(n_parallel=2, n_ctx_seq=64)
    new, idle = SlotTable(2).slots
    holding(runtime, idle, SHARED)
    SlotMemory(runtime, None).clear_idle(new, [new, idle])
    assert runtime.memory[1] == SHARED


def test_a_reset_clears_what_idle_slots_had_not_saved_yet_but_not_what_came_after():
    runtime = FakeRuntime(n_parallel=2)
    cache = HostPromptCache(capacity_bytes=1 << 20, max_entries=8, ttl_seconds=0)
    table = SlotTable(2)
    before, after = table.slots
    holding(runtime, before, list(range(100, 140)), busy=True).release()
    cache.reset()  # POST /v1/cache/reset, from the HTTP thread, before the idle saver ran
    holding(runtime, after, list(range(200, 240)), busy=True).release()
    memory = SlotMemory(runtime, cache)
    while memory.save_one_idle(table):
        pass
    assert cache.lookup(list(range(100, 140))) is None
    assert cache.lookup(list(range(200, 240)))[1] == 32
    assert runtime.memory[before.id] == list(range(100, 140))  # the slot itself keeps its prefix


# --cache-reuse: runs past the prefix moved into place (llama-server's chunk reuse)

def _chunks(n: int, first: int) -> list[int]:
    return list(range(first, first + n))


def test_runs_past_the_prefix_are_moved_to_where_the_prompt_has_them():
    runtime = FakeRuntime(n_parallel=1, n_ctx_seq=1024)
    system, old, a, skipped, b = _chunks(20, 1), _chunks(30, 100), _chunks(25, 200), _chunks(10, 300), _chunks(40, 400)
    slot = holding(runtime, SlotTable(1).slots[0], system + old + a + skipped + b)
    prompt = system + a + b + [999, 998]
    SlotMemory(runtime, None, chunk_reuse=8).admit(slot, prompt, n_common=20, reuse=True)
    assert slot.cached_tokens == runtime.memory[0] == system + a + b  # moved twice, the rest cut
    assert runtime.violations == [] and slot.cache_tier == "slot"


def test_short_runs_other_scales_and_media_are_not_moved():
    system, old, a = _chunks(20, 1), _chunks(30, 100), _chunks(6, 200)
    cases = [  # (least run, the admission's arguments, what the slot keeps)
        (8, {"n_common": 20}, system),  # a is shorter than the least run
        (4, {"n_common": 20, "chunks": False}, system),  # a prompt with media
        (4, {"n_common": 0, "lora": (1.0,)}, []),  # computed under other LoRA scales
    ]
    for least, kwargs, kept in cases:
        runtime = FakeRuntime(n_parallel=1)
        slot = holding(runtime, SlotTable(1).slots[0], system + old + a)
        SlotMemory(runtime, None, chunk_reuse=least).admit(slot, system + a + [999], reuse=True, **kwargs)
        assert slot.cached_tokens == runtime.memory[0] == kept, (least, kwargs)


def test_the_last_prompt_token_is_always_decoded_again():
    runtime = FakeRuntime(n_parallel=1)
    system, old, a = _chunks(20, 1), _chunks(30, 100), _chunks(12, 200)
    slot = holding(runtime, SlotTable(1).slots[0], system + old + a)
    SlotMemory(runtime, None, chunk_reuse=4).admit(slot, system + a, n_common=20, reuse=True)
    assert slot.cached_tokens == runtime.memory[0] == system + a[:-1]


def test_a_prompt_built_to_match_everywhere_is_looked_at_boundedly():
    """Thousands of places start like the prompt's next run and none go on: the look
    is bounded (MAX_CHUNK_PROBES places), not quadratic, and moves nothing."""
    runtime = FakeRuntime(n_parallel=1, n_ctx_seq=40000)
    held = [5] + ([1] * 15 + [2]) * 2000
    slot = holding(runtime, SlotTable(1).slots[0], held)
    started = time.perf_counter()
    SlotMemory(runtime, None, chunk_reuse=16).admit(slot, [5] + [1] * 16 + [3] * 100, n_common=1, reuse=True)
    assert time.perf_counter() - started < 5
    assert slot.cached_tokens == runtime.memory[0] == [5]
