"""The engine's idle-slot work: slot actions wait for their slot, and fail when the
engine stops."""

from __future__ import annotations

import pytest

from mlxcel.engine.idle_work import IdleWork
from mlxcel.engine.request import GenerationRequest
from mlxcel.engine.slot_files import SlotAction, SlotFileError
from mlxcel.engine.slots import SlotState, SlotTable


class Runtime:
    def __init__(self) -> None:
        self.cleared: list[int] = []

    def seq_clear(self, seq_id: int) -> None:
        self.cleared.append(seq_id)


def _busy(slots: SlotTable, slot_id: int) -> None:
    slot = slots.slots[slot_id]
    slot.request = GenerationRequest(prompt_tokens=[1], emit=lambda event: None)
    slot.state = SlotState.DECODE


def _work(n_slots: int = 2) -> tuple[IdleWork, SlotTable, Runtime]:
    slots, runtime = SlotTable(n_slots), Runtime()
    return IdleWork(slots, runtime, 256, 100), slots, runtime


def test_slot_actions_wait_for_their_slot_and_bad_ids_fail():
    work, slots, _ = _work()
    _busy(slots, 0)
    waiting, bad = SlotAction("erase", 0), SlotAction("erase", 5)
    work.take(waiting), work.take(bad)
    work.run_ready()
    with pytest.raises(SlotFileError, match="Invalid slot ID"):
        bad.done.result(0)
    assert not waiting.done.done() and work.pending
    slots.slots[0].release()
    slots.slots[0].cached_tokens = [1, 2]
    assert work.run_ready() and waiting.done.result(0).n_tokens == 2


def test_everything_waiting_fails_when_the_engine_stops():
    work, slots, _ = _work()
    _busy(slots, 0)
    action = SlotAction("save", 0, "/tmp/x.bin")
    assert work.take(action) and not work.take(object())
    work.fail_all("the server is shutting down")
    with pytest.raises(SlotFileError, match="shutting down"):
        action.done.result(0)
    assert not work.pending


def test_a_cancelled_action_is_dropped_without_breaking_the_engine():
    """A waiting action whose caller was cancelled (a shutdown cancels the route awaiting
    it): answering it raised InvalidStateError out of run_ready and crashed the engine thread."""
    work, slots, runtime = _work()
    _busy(slots, 0)
    cancelled, other = SlotAction("erase", 0), SlotAction("erase", 0)
    work.take(cancelled), work.take(other)
    work.run_ready()
    assert cancelled.done.cancel()
    slots.slots[0].release()
    assert work.run_ready() and other.done.result(0).n_tokens == 0 and not work.pending
    assert runtime.cleared == [0]  # the cancelled erase did not run
    late = SlotAction("erase", 0)
    _busy(slots, 0)
    work.take(late), work.run_ready()
    late.done.cancel()
    work.fail_all("the server is shutting down")  # nothing raised
    assert not work.pending
