"""BurstWatch: when an engine woken from idle stops and starts waiting for bursts."""

from __future__ import annotations

from mlxcel.engine.burst_watch import BurstWatch


def test_waits_until_enough_lone_wakes_in_a_row():
    watch = BurstWatch(quiet_wakes=3)
    for t in range(3):
        assert watch.waits
        watch.woke(float(t), waited=True, queued=1)
    assert not watch.waits


def test_a_wake_that_gathered_a_second_request_starts_the_count_again():
    watch = BurstWatch(quiet_wakes=2)
    watch.woke(0.0, waited=True, queued=1)
    watch.woke(1.0, waited=True, queued=3)
    watch.woke(2.0, waited=True, queued=1)
    assert watch.waits  # one lone wake since the burst
    watch.woke(3.0, waited=True, queued=1)
    assert not watch.waits


def test_requests_arriving_together_at_an_unwaited_wake_count_as_a_burst():
    watch = BurstWatch(quiet_wakes=1)
    watch.woke(0.0, waited=True, queued=1)
    assert not watch.waits
    watch.woke(1.0, waited=False, queued=2)  # two were already there when it woke
    assert watch.waits


def test_a_request_arriving_busy_soon_after_an_unwaited_wake_is_a_missed_burst():
    watch = BurstWatch(quiet_wakes=1)
    watch.woke(0.0, waited=True, queued=1)
    watch.woke(10.0, waited=False, queued=1)
    assert not watch.waits
    watch.arrived_busy(10.05, window=0.02)  # too late: a request of its own
    assert not watch.waits
    watch.woke(20.0, waited=False, queued=1)
    watch.arrived_busy(20.01, window=0.02)
    assert watch.waits


def test_an_arrival_after_a_waited_wake_is_no_missed_burst():
    watch = BurstWatch(quiet_wakes=1)
    watch.woke(0.0, waited=True, queued=1)
    watch.arrived_busy(0.001, window=0.02)  # that wake waited: this one came after the window
    assert not watch.waits


def test_a_wake_whose_request_was_cancelled_while_it_waited_is_a_lone_wake():
    watch = BurstWatch(quiet_wakes=1)
    watch.woke(0.0, waited=True, queued=0)  # the request that woke it was cancelled meanwhile
    assert not watch.waits
