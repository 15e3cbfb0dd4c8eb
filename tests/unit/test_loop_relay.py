"""LoopRelay: events from other threads reach the loop in order, many of them by one
wake-up, none lost to a racing delivery or a failing listener, none after close."""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref

from mlxcel.turn import loop_relay
from mlxcel.turn.loop_relay import relay_for


def test_events_from_a_thread_arrive_in_order_and_share_wake_ups():
    async def main():
        loop = asyncio.get_running_loop()
        relay = relay_for(loop)
        assert relay_for(loop) is relay
        wake_ups = 0
        real = loop.call_soon_threadsafe

        def counting(*args):
            nonlocal wake_ups
            wake_ups += 1
            return real(*args)

        loop.call_soon_threadsafe = counting
        got: list[int] = []
        done = asyncio.Event()

        def receive(n: int) -> None:
            got.append(n)
            if n == 9_999:
                done.set()

        def produce():
            for n in range(10_000):
                relay.call(receive, n)

        threads = [threading.Thread(target=produce)]
        threads[0].start()
        await asyncio.wait_for(done.wait(), 30)
        threads[0].join()
        return got, wake_ups

    got, wake_ups = asyncio.run(main())
    assert got == list(range(10_000))
    assert 1 <= wake_ups < 10_000


def test_a_burst_before_the_loop_runs_is_one_wake_up_and_a_failing_listener_loses_nothing():
    async def main():
        loop = asyncio.get_running_loop()
        relay = relay_for(loop)
        calls = []
        real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *a: (calls.append(a), real(*a))
        got = []

        def fail(_):
            raise ValueError("listener broke")

        thread = threading.Thread(target=lambda: [relay.call(got.append, 1), relay.call(fail, None),
                                                  relay.call(got.append, 2)])
        thread.start()
        thread.join()  # the loop has not run since: all three wait for one delivery
        await asyncio.sleep(0.01)
        return got, len(calls)

    assert asyncio.run(main()) == ([1, 2], 1)


def test_after_the_loop_closes_events_are_dropped_and_the_loop_is_not_kept_alive():
    loop = asyncio.new_event_loop()
    relay = relay_for(loop)
    loop.close()
    relay.call(print, "never")  # no exception: nobody listens any more
    relay.call(print, "never")
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None
    assert relay not in loop_relay._relays.values()


def test_a_loop_closed_with_a_delivery_pending_keeps_nothing():
    loop = asyncio.new_event_loop()
    relay = relay_for(loop)
    relay.call(print, "never")  # scheduled, but the loop never runs again
    loop.close()
    for n in range(1000):
        relay.call(print, n)
    assert len(relay._pending) == 0
