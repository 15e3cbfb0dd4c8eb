"""Which idle slot a request takes: the longest cached prefix first, then one whose
tokens need no saving, then (with a KV stream per slot and a host cache) one that
keeps the busy slots in one run of ids, then the least recently used."""

from mlxcel.engine.slots import SlotState, SlotTable


def table(n: int, busy: set[int], contiguous: bool, held: dict[int, list[int]] | None = None,
          used: dict[int, float] | None = None) -> SlotTable:
    slots = SlotTable(n, contiguous)
    for slot in slots:
        slot.state = SlotState.DECODE if slot.id in busy else SlotState.IDLE
        slot.cached_tokens = list((held or {}).get(slot.id, []))
        slot.last_used = (used or {}).get(slot.id, 0.0)
    return slots


def test_a_fresh_prompt_fills_the_gap_between_busy_slots():
    # slot 1 was used last and slot 3 never: least recently used alone would leave 0, 2, 3 busy
    slots = table(4, {0, 2}, contiguous=True, held={1: [7, 8, 9]}, used={1: 5.0})
    assert slots.choose([1, 2, 3], reuse=True)[0].id == 1
    assert slots.choose([1, 2, 3], reuse=False)[0].id == 3  # without reuse an empty slot first, as before
    plain = table(4, {0, 2}, contiguous=False, held={1: [7, 8, 9]}, used={1: 5.0})
    assert plain.choose([1, 2, 3], reuse=True)[0].id == 3


def test_a_cached_prefix_and_unsaved_tokens_still_come_first():
    slots = table(4, {0, 2}, contiguous=True, held={1: [7, 8, 9], 3: [1, 2]}, used={1: 5.0})
    assert slots.choose([1, 2, 3], reuse=True) == (slots.slots[3], 2)
    slots = table(4, {0, 2}, contiguous=True, held={1: [7, 8, 9]}, used={1: 5.0})
    slots.slots[1].unsaved = True  # its tokens would be lost or must be copied out first
    assert slots.choose([1, 2, 3], reuse=True)[0].id == 3


def test_the_run_extends_at_either_end():
    slots = table(4, {1}, contiguous=True, used={0: 3.0, 2: 2.0, 3: 1.0})
    assert slots.choose([5], reuse=True)[0].id == 2  # 2 and 0 both extend the run; 2 is older
    assert table(4, set(), contiguous=True, used={0: 3.0, 1: 1.0}).choose([5], reuse=True)[0].id in {2, 3}
