"""held_wakeups: the engine thread's wake-ups wait for its release (the moment before
a decode), all of them go out when the hold ends however it ends, and no other
thread's wake-up is held."""

from __future__ import annotations

import asyncio
import threading

import pytest

from mlxcel.engine import held_wakeups
from mlxcel.turn.loop_relay import relay_for


def test_outside_a_hold_nothing_is_deferred():
    assert held_wakeups.defer(lambda: None) is False
    held_wakeups.release()  # nothing held: a no-op


def test_held_wake_ups_go_out_in_order_at_release_and_at_the_end_of_the_hold():
    woken: list[str] = []
    with held_wakeups.holding():
        assert held_wakeups.defer(lambda: woken.append("a"))
        assert held_wakeups.defer(lambda: woken.append("b"))
        assert woken == []
        held_wakeups.release()
        assert woken == ["a", "b"]
        held_wakeups.release()  # each goes once
        assert woken == ["a", "b"]
        with held_wakeups.holding():  # a nested hold is part of the outer one
            assert held_wakeups.defer(lambda: woken.append("c"))
        assert woken == ["a", "b"]
        assert held_wakeups.defer(lambda: woken.append("d"))
    assert woken == ["a", "b", "c", "d"]
    assert held_wakeups.defer(lambda: None) is False  # the hold is over


def test_a_hold_that_raises_still_sends_its_wake_ups_and_a_failing_one_loses_nothing(caplog):
    woken: list[str] = []

    def broken() -> None:
        raise RuntimeError("boom")

    with pytest.raises(ValueError), held_wakeups.holding():
        held_wakeups.defer(broken)
        held_wakeups.defer(lambda: woken.append("after"))
        raise ValueError("the step failed")
    assert woken == ["after"]
    assert "a held wake-up failed" in caplog.text
    assert held_wakeups.defer(lambda: None) is False


def test_only_the_holding_thread_defers():
    seen: list[bool] = []
    with held_wakeups.holding():
        other = threading.Thread(target=lambda: seen.append(held_wakeups.defer(lambda: None)))
        other.start()
        other.join()
    assert seen == [False]


def test_a_relay_called_by_a_holding_thread_wakes_its_loop_only_at_release():
    """The engine thread's tokens reach the loop after its release, every one of them
    by a single wake-up; until then the loop has not been woken at all."""

    async def main():
        loop = asyncio.get_running_loop()
        relay = relay_for(loop)
        wake_ups: list[tuple] = []
        real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *a: (wake_ups.append(a), real(*a))
        got: list[int] = []
        done = asyncio.Event()
        checked: list[tuple[int, list[int]]] = []

        def engine_step() -> None:
            with held_wakeups.holding():
                for n in range(5):
                    relay.call(got.append, n)
                threading.Event().wait(0.2)  # the loop is free meanwhile: it must not have been woken
                checked.append((len(wake_ups), list(got)))
                held_wakeups.release()
            relay.call(lambda _: done.set(), None)

        thread = threading.Thread(target=engine_step)
        thread.start()
        await asyncio.wait_for(done.wait(), 10)
        thread.join()
        return checked, got, len(wake_ups)

    checked, got, wake_ups = asyncio.run(main())
    assert checked == [(0, [])]
    assert got == [0, 1, 2, 3, 4]
    assert wake_ups <= 2
