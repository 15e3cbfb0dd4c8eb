"""The router's status announcements (mlxcel/fleet/events.py): every listener gets each
event in order, from any thread; one that falls MAX_PENDING behind is ended, and an
ended or closed listener gets nothing more."""

import asyncio
import threading

from mlxcel.fleet import events as fleet_events
from mlxcel.fleet.events import FleetEvents


def test_each_listener_gets_every_event_in_order_from_other_threads():
    async def scenario():
        hub = FleetEvents()
        first, second = hub.subscribe(), hub.subscribe()
        thread = threading.Thread(target=lambda: [hub.status(f"m{i}", "loading") for i in range(5)])
        thread.start()
        thread.join()
        hub.publish("*", "models_reload")
        got = [[await listener.next() for _ in range(6)] for listener in (first, second)]
        return got, hub.listeners

    got, listeners = asyncio.run(scenario())
    expected = [{"model": f"m{i}", "event": "model_status", "data": {"status": "loading"}} for i in range(5)]
    assert got == [expected + [{"model": "*", "event": "models_reload"}]] * 2 and listeners == 2


def test_a_listener_too_far_behind_is_ended_and_forgotten(monkeypatch):
    monkeypatch.setattr(fleet_events, "MAX_PENDING", 3)

    async def scenario():
        hub = FleetEvents()
        slow = hub.subscribe()
        for i in range(5):
            hub.status("m", f"s{i}")
        await asyncio.sleep(0)  # the deliveries run on the loop
        read = [await slow.next() for _ in range(4)]
        hub.status("m", "after")
        await asyncio.sleep(0)
        return read, hub.listeners, slow._queue.qsize()

    loop_errors = []

    def run():
        loop = asyncio.new_event_loop()
        loop.set_exception_handler(lambda _loop, context: loop_errors.append(context))
        try:
            return loop.run_until_complete(scenario())
        finally:
            loop.close()

    read, listeners, left = run()
    assert loop_errors == []  # every event past the end is dropped quietly
    assert [e["data"]["status"] for e in read[:3]] == ["s0", "s1", "s2"] and read[3] is None
    assert listeners == 0 and left == 0


def test_a_closed_listener_gets_nothing_more():
    async def scenario():
        hub = FleetEvents()
        listener = hub.subscribe()
        listener.close()
        hub.status("m", "loaded")
        await asyncio.sleep(0)
        return listener._queue.qsize(), hub.listeners

    assert asyncio.run(scenario()) == (0, 0)
