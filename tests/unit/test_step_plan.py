"""The step planner: what one engine step decodes, written into the batch and undone."""

from __future__ import annotations

from mlxcel.engine.batch import TokenBatch
from mlxcel.engine.request import GenerationRequest
from mlxcel.engine.slots import Slot, SlotState, SlotTable
from mlxcel.engine.step_plan import StepPlanner, fill_batch, rewind


class NoDrafts:
    def __init__(self, failing: set[int] = frozenset()) -> None:
        self.failing = failing

    def option(self, slot: Slot, batch_tokens: int, expected_yield: float):
        if slot.id in self.failing:
            raise RuntimeError("drafting broke")
        return None


def _decoding(slot: Slot, history: list[int], next_token: int) -> None:
    slot.request = GenerationRequest(prompt_tokens=history[:2], emit=lambda event: None)
    slot.cached_tokens = list(history)
    slot.next_token = next_token
    slot.state = SlotState.DECODE


def _prefilling(slot: Slot, prompt: list[int], admitted_at: float, done: int = 0) -> None:
    slot.request = GenerationRequest(prompt_tokens=list(prompt), emit=lambda event: None)
    slot.cached_tokens = list(prompt[:done])
    slot.admitted_at = admitted_at
    slot.state = SlotState.PREFILL


def _planner(slots: SlotTable, capacity=32, chunk=4, n_ctx_slot=64, drafts=None, shift=None, failed=None,
             n_ubatch=512):
    return StepPlanner(slots, capacity, drafts or NoDrafts(), prefill_chunk=chunk, n_ctx_slot=n_ctx_slot,
                       split_kv=True, n_ubatch=n_ubatch, sizes_drafts_together=False, shift_context=shift,
                       request_failed=lambda slot, phase, exc: failed.append((slot.id, phase)))


def test_decoding_tokens_first_then_the_oldest_prompt_within_the_chunk_in_slot_order():
    slots = SlotTable(4)
    _prefilling(slots.slots[0], list(range(100, 110)), admitted_at=2.0)
    _decoding(slots.slots[1], [1, 2, 3], next_token=4)
    _prefilling(slots.slots[2], list(range(200, 203)), admitted_at=1.0)  # the oldest
    spans = _planner(slots, chunk=4).plan()
    assert [(s.slot.id, s.tokens, s.start, s.prefill, s.last) for s in spans] == [
        (0, [100], 0, True, False),  # what the chunk leaves after the older prompt
        (1, [4], 3, False, True),
        (2, [200, 201, 202], 0, True, True),
    ]


def test_a_lone_prompt_takes_the_whole_batch_and_media_rows_come_off_it():
    slots = SlotTable(2)
    _prefilling(slots.slots[1], list(range(50)), admitted_at=1.0, done=5)
    planner = _planner(slots, capacity=32, chunk=4)
    assert [(s.start, len(s.tokens)) for s in planner.plan()] == [(5, 32)]
    assert [(s.start, len(s.tokens)) for s in planner.plan(media_rows=10)] == [(5, 22)]


def test_lone_prompts_go_a_micro_batch_a_step():
    """Not the whole batch at once: a request cancelled while its long prompt is
    prefilled (its client left) stops after the micro-batch under way."""
    slots = SlotTable(2)
    _prefilling(slots.slots[0], list(range(3000)), admitted_at=1.0, done=100)
    _prefilling(slots.slots[1], list(range(300)), admitted_at=2.0)
    planner = _planner(slots, capacity=2048, chunk=256, n_ctx_slot=4096, n_ubatch=512)
    assert [(s.slot.id, s.start, len(s.tokens)) for s in planner.plan()] == [(0, 100, 512)]
    slots.slots[0].cached_tokens = list(range(2900))
    assert [(s.slot.id, s.start, len(s.tokens)) for s in planner.plan()] == [(0, 2900, 100), (1, 0, 300)]


def test_a_slot_whose_drafting_fails_fails_alone_with_its_history_untouched():
    slots, failed = SlotTable(2), []
    _decoding(slots.slots[0], [1, 2], next_token=3)
    _decoding(slots.slots[1], [7, 8], next_token=9)
    spans = _planner(slots, drafts=NoDrafts(failing={0}), failed=failed).plan()
    assert failed == [(0, "drafting")]
    assert [s.slot.id for s in spans] == [1]
    assert slots.slots[0].cached_tokens == [1, 2]


def test_a_full_slot_is_shifted_and_left_out_when_the_shift_ends_it():
    slots, shifted = SlotTable(2), []
    _decoding(slots.slots[0], list(range(7)), next_token=7)  # its next token takes cell 7 of 8
    _decoding(slots.slots[1], [1], next_token=2)
    spans = _planner(slots, n_ctx_slot=8, shift=lambda slot: shifted.append(slot.id) or False).plan()
    assert shifted == [0] and [s.slot.id for s in spans] == [1]
    # no context shift: the slot is planned, and its request ends at the context's end when sampled
    assert [s.slot.id for s in _planner(slots, n_ctx_slot=8).plan()] == [0, 1]


def test_fill_writes_the_plan_and_rewind_undoes_it():
    slots = SlotTable(3)
    _decoding(slots.slots[0], [1, 2, 3], next_token=4)
    _prefilling(slots.slots[1], list(range(100, 106)), admitted_at=1.0)
    _prefilling(slots.slots[2], list(range(300, 340)), admitted_at=2.0)
    spans = _planner(slots, chunk=8).plan()
    spans[0].tokens.append(5)  # a draft
    batch = TokenBatch(32)
    assert fill_batch(batch, spans) == 2
    assert batch.size == 2 + 6 + 2
    assert slots.slots[0].cached_tokens == [1, 2, 3, 4] and slots.slots[0].drafts == [5]
    assert slots.slots[0].batch_index == 0 and slots.slots[0].draft_indices == [1]
    assert slots.slots[1].batch_index == 7  # the prompt's last token has the logits
    assert slots.slots[2].batch_index == -1 and slots.slots[2].cached_tokens == [300, 301]
    removed = []
    rewind(spans, lambda seq, start, end: removed.append((seq, start, end)))
    assert removed == [(0, 3, -1), (1, 0, -1), (2, 0, -1)]
    assert [s.cached_tokens for s in slots.slots] == [[1, 2, 3], [], []]
    assert all(s.batch_index == -1 and s.drafts == [] for s in slots.slots)
