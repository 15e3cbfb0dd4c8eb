"""Pure engine logic: stop strings, the prefill queue, slot choice, UTF-8 reassembly."""

from __future__ import annotations

import random

from mlxcel.engine.prefill_queue import PrefillQueue
from mlxcel.engine.request import GenerationRequest, Priority
from mlxcel.engine.slots import SlotTable
from mlxcel.engine.stop_strings import StopStringMatcher
from mlxcel.engine.text_decoder import IncrementalTextDecoder


def _feed_all(stops, pieces):
    matcher = StopStringMatcher(stops)
    out, hit = [], None
    for piece in pieces:
        text, hit = matcher.feed(piece)
        out.append(text)
        if hit:
            break
    if not hit:
        out.append(matcher.flush())
    return "".join(out), hit


def test_stop_string_split_across_pieces_is_held_then_cut():
    assert _feed_all(["END"], ["abc E", "N", "D tail"]) == ("abc ", "END")


def test_partial_match_that_fails_is_released():
    matcher = StopStringMatcher(["END"])
    assert matcher.feed("abc EN") == ("abc ", None)
    assert matcher.feed("X") == ("ENX", None)


def test_earliest_stop_wins_and_random_splits_agree():
    text = "one two three four"
    rng = random.Random(0)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(text)), 5))
        pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)])]
        assert _feed_all(["four", "two"], pieces) == ("one ", "two")
        assert _feed_all(["absent"], pieces) == (text, None)


def test_prefill_queue_orders_by_priority_then_arrival():
    queue = PrefillQueue()
    made = {}
    for name, priority in [("a", Priority.LOW), ("b", Priority.NORMAL), ("c", Priority.HIGH), ("d", Priority.NORMAL)]:
        made[name] = GenerationRequest(prompt_tokens=[1], emit=lambda e: None, priority=priority)
        queue.push(made[name])
    assert queue.remove(made["d"].id) is made["d"]
    assert [queue.pop() for _ in range(len(queue))] == [made["c"], made["b"], made["a"]]


def test_priority_header_parsing():
    assert Priority.from_header("HIGH") is Priority.HIGH
    assert Priority.from_header(" low ") is Priority.LOW
    assert Priority.from_header("urgent") is Priority.NORMAL
    assert Priority.from_header(None) is Priority.NORMAL


def test_slot_choice_prefers_the_longest_shared_prefix():
    table = SlotTable(3)
    table.slots[0].cached_tokens = [1, 2, 3]
    table.slots[1].cached_tokens = [1, 2, 3, 4, 5]
    table.slots[2].cached_tokens = []
    slot, n = table.choose([1, 2, 3, 4, 9], reuse=True)
    assert (slot.id, n) == (1, 4)
    slot, n = table.choose([1, 2, 3, 4, 9], reuse=False)
    assert (slot.id, n) == (2, 0)  # an empty slot, so others' prefixes survive


def test_slot_choice_on_a_tie_prefers_a_slot_with_nothing_left_to_save():
    table = SlotTable(3)
    for slot, tokens in zip(table.slots, ([5, 6], [7, 8], [9])):
        slot.cached_tokens = list(tokens)
        slot.release()  # finished: its tokens may not be in the host cache yet
    assert all(s.unsaved for s in table.slots)
    table.slots[1].unsaved = False  # saved while the engine was idle
    slot, n = table.choose([1, 2, 3], reuse=True)
    assert (slot.id, n) == (1, 0)
    slot, n = table.choose([7, 8, 1], reuse=True)
    assert (slot.id, n) == (1, 2)  # a shared prefix still wins
    table.slots[1].cached_tokens = []
    table.slots[1].release()
    assert not table.slots[1].unsaved  # nothing held, nothing to save


def test_utf8_split_across_tokens_is_reassembled():
    decoder = IncrementalTextDecoder()
    data = "✓é".encode()
    assert decoder.feed(data[:1]) == ""
    assert decoder.feed(data[1:3]) == "✓"
    assert decoder.feed(data[3:]) == "é"
    assert decoder.flush() == ""
