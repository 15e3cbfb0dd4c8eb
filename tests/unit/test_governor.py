"""The memory governor's bands, load gate and shedding choice, and the /proc probe."""

from __future__ import annotations

import pytest

from mlxcel.engine.host_memory import HostMemory, MemoryProbeError, read_host_memory
from mlxcel.engine.slots import SlotState
from mlxcel.engine.snapshot import EngineSnapshot, SlotView
from mlxcel.fleet.governor import (
    FORCE_BAND_ENV,
    GOVERNOR_ENV,
    SHED_COOLDOWN_S,
    Band,
    LiveRequest,
    MemoryGovernor,
    classify,
    held_bytes,
    live_requests,
)
from mlxcel.fleet.readiness import QueueCounters, Readiness, readiness

GB = 1024**3


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def host(available_gb: float, total_gb: float = 100.0) -> HostMemory:
    return HostMemory(int(total_gb * GB), int(available_gb * GB), GB)


@pytest.mark.parametrize("available, band", [(50, Band.GREEN), (19, Band.YELLOW), (9, Band.ORANGE), (4, Band.RED)])
def test_host_free_fraction_sets_the_band(available, band):
    assert classify(host(available), None, None, floor_bytes=0) is band


@pytest.mark.parametrize("used, band", [(79, Band.GREEN), (80, Band.YELLOW), (90, Band.ORANGE), (95, Band.RED),
                                        (200, Band.RED)])
def test_budget_use_sets_the_band(used, band):
    assert classify(host(50), used * GB, 100 * GB, floor_bytes=0) is band


def test_the_floor_makes_it_orange_then_red():
    assert classify(host(30), None, None, floor_bytes=16 * GB) is Band.ORANGE  # under 2 x floor
    assert classify(host(30), None, None, floor_bytes=31 * GB) is Band.RED


def test_the_worst_pressure_wins_and_unknowns_count_for_nothing():
    assert classify(host(50), 96 * GB, 100 * GB, 0) is Band.RED
    assert classify(None, None, None, 0) is Band.GREEN


def test_a_band_worsens_at_once_and_eases_only_with_a_margin():
    gov = MemoryGovernor(100 * GB, floor_bytes=0, enabled=True)
    assert gov.observe(host(50), 96 * GB) is Band.RED
    assert gov.observe(host(50), 94 * GB) is Band.RED  # 0.94 + margin is still red
    assert gov.observe(host(50), 92 * GB) is Band.ORANGE
    assert gov.observe(host(50), 10 * GB) is Band.GREEN
    assert gov.band_changes == 3


def test_disabled_it_observes_but_acts_green(monkeypatch):
    monkeypatch.setenv(GOVERNOR_ENV, "0")
    gov = MemoryGovernor(GB, floor_bytes=0)
    assert gov.enabled is False
    gov.observe(host(50), 10 * GB)
    assert gov.observed is Band.RED and gov.band is Band.GREEN
    assert gov.should_defer_load(100 * GB) is None
    assert gov.pick_shed([LiveRequest(1, 10)]) is None
    assert gov.snapshot()["enabled"] is False


def test_a_small_budget_turns_it_red_and_the_largest_request_is_shed():
    clock = Clock()
    gov = MemoryGovernor(GB, floor_bytes=0, enabled=True, clock=clock)
    requests = [LiveRequest(1, 500, "a"), LiveRequest(2, 4000, "b"), LiveRequest(3, 4000, "a")]
    assert gov.pick_shed(requests) is None  # green
    gov.observe(host(50), 2 * GB)
    victim = gov.pick_shed(requests)
    assert victim.request_id == 3  # the most KV tokens; the newest on a tie
    gov.record_shed(victim)
    assert gov.pick_shed(requests) is None  # the cooldown
    clock.now += SHED_COOLDOWN_S
    assert gov.pick_shed(requests) is not None
    snap = gov.snapshot()
    assert snap["sheds"] == 1 and snap["band"] == "red"
    assert snap["last_shed"] == {"request_id": 3, "model": "a", "kv_tokens": 4000, "band": "red", "at": 1000.0}
    assert gov.pick_shed([]) is None


def test_a_forced_band_wins_until_released(monkeypatch):
    gov = MemoryGovernor(None, enabled=True)
    gov.force("red")
    assert gov.band is Band.RED and gov.pick_shed([LiveRequest(1, 1)]).request_id == 1
    gov.force(None)
    assert gov.band is Band.GREEN and gov.band_changes == 2
    monkeypatch.setenv(FORCE_BAND_ENV, "orange")
    assert MemoryGovernor(None, enabled=True).band is Band.ORANGE


def test_loads_defer_under_pressure_past_the_budget_or_below_the_floor():
    gov = MemoryGovernor(10 * GB, floor_bytes=GB, enabled=True)
    assert gov.should_defer_load(4 * GB, held_bytes=5 * GB, host=host(50)) is None
    reason = gov.should_defer_load(6 * GB, held_bytes=5 * GB)
    assert "6442450944" in reason and "5368709120" in reason and "budget" in reason
    reason = gov.should_defer_load(4 * GB, host=host(4.5))
    assert "must stay free" in reason
    gov.force(Band.ORANGE)
    assert gov.should_defer_load(1) == "memory pressure (governor orange)"
    assert gov.deferred_loads == 3


def test_live_requests_are_the_busy_slots_with_their_tokens():
    slots = (SlotView(0, SlotState.DECODE, 7, 10, 3, 13), SlotView(1, SlotState.IDLE, -1, 0, 0, 50))
    snap = EngineSnapshot(slots=slots)
    assert live_requests("m", snap) == [LiveRequest(7, 13, "m")]


def test_the_host_probe_reads_proc(tmp_path):
    memory = read_host_memory()
    assert memory.total_bytes > memory.available_bytes > 0 and memory.process_rss_bytes > 0
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       2048 kB\nMemFree:  10 kB\nMemAvailable:   1024 kB\n")
    statm = tmp_path / "statm"
    statm.write_text("100 25 3 0 0 0 0\n")
    memory = read_host_memory(meminfo, statm, cgroup=None)
    assert memory.total_bytes == 2048 * 1024 and memory.available_bytes == 1024 * 1024
    assert memory.process_rss_bytes % 25 == 0 and memory.process_rss_bytes >= 25 * 4096
    cgroup = tmp_path / "cg"
    cgroup.mkdir()
    (cgroup / "memory.max").write_text("1048576\n")
    (cgroup / "memory.current").write_text("786432\n")
    limited = read_host_memory(meminfo, statm, cgroup)
    assert limited.total_bytes == 1048576 and limited.available_bytes == 262144
    meminfo.write_text("MemTotal: 2048 kB\n")  # no MemAvailable
    with pytest.raises(MemoryProbeError):
        read_host_memory(meminfo, statm, cgroup=None)
    with pytest.raises(MemoryProbeError):
        read_host_memory(tmp_path / "missing", statm, cgroup=None)


def test_readiness_names_pressure_then_queue_then_busy():
    assert readiness("green", 0, [1, 0], 2) == Readiness(True)
    assert readiness("yellow", 0, [], 2).ready is True  # nothing resident: a request would load a model
    assert readiness("orange", 3, [0], 9) == Readiness(False, "pressure", 9)
    assert readiness(Band.RED, 0, [1], 2).reason == "pressure"
    assert readiness("green", 1, [1], 4) == Readiness(False, "queue", 4)
    assert readiness("green", 0, [0, 0], 2).to_dict() == {"ready": False, "reason": "busy"}


def test_queue_rejections_are_counted_with_the_last_reason():
    counters = QueueCounters()
    counters.reject("queue full (8 waiting)")
    counters.reject("queue full (9 waiting)")
    assert counters.rejections == 2 and counters.last_reject_reason == "queue full (9 waiting)"
    assert counters.last_reject_at is not None


def test_a_tick_sheds_once_the_requests_outgrow_a_small_budget():
    clock = Clock()
    gov = MemoryGovernor(budget_bytes=1_000_000, floor_bytes=0, enabled=True, clock=clock)
    slots = (SlotView(0, SlotState.DECODE, 7, 100, 10, 110), SlotView(1, SlotState.DECODE, 8, 300, 5, 305),
             SlotView(2, SlotState.IDLE, -1, 0, 0, 4000))  # an idle slot's tokens hold nothing for the budget
    snap = EngineSnapshot(slots=slots)
    assert held_bytes(500_000, 1000, snap) == 915_000 and held_bytes(500_000, 1000, None) == 500_000
    assert gov.check(host(50), held_bytes(500_000, 1000, snap), live_requests("m", snap)) is None  # orange
    assert gov.band is Band.ORANGE
    grown = EngineSnapshot(slots=(slots[0], SlotView(1, SlotState.DECODE, 8, 300, 200, 500)))
    victim = gov.check(host(50), held_bytes(500_000, 1000, grown), live_requests("m", grown))
    assert victim == LiveRequest(8, 500, "m") and gov.sheds == 1 and gov.last_shed["model"] == "m"
