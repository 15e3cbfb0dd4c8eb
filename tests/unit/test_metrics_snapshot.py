"""The /v1/metrics snapshot built from hand-made engine snapshots, its sections failing
alone, the rates, and the Prometheus text parsed back with prometheus_client's parser."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mlxcel.engine.host_memory import HostMemory, MemoryProbeError
from mlxcel.engine.rates import combine, rates_of
from mlxcel.engine.slots import SlotState
from mlxcel.engine.snapshot import EngineSnapshot, QueuedView, SlotView
from mlxcel.engine.stats import EngineStats, RequestTiming
from mlxcel.fleet.capacity import build_table
from mlxcel.fleet.governor import MemoryGovernor
from mlxcel.fleet.readiness import QueueCounters
from mlxcel.observability.metrics_snapshot import ModelView, SnapshotView, build_snapshot, render_prometheus

NOW = 100.0
GB = 1024**3


def engine_a() -> EngineSnapshot:
    stats = EngineStats(predicted_steps=90, predicted_seconds=3.0)
    stats.record_request(RequestTiming(500, 400, 1.0, 51, 2.5))
    stats.record_request(RequestTiming(300, 200, 1.0, 31, 1.5))
    slots = (
        SlotView(0, SlotState.DECODE, 11, 120, 21, 140, created=90.0, admitted_at=91.0, first_token_at=95.0,
                 max_tokens=64, n_reused=64, cache_tier="slot"),
        SlotView(1, SlotState.PREFILL, 12, 900, 0, 256, created=98.0, admitted_at=99.0),
        SlotView(2, SlotState.IDLE, -1, 0, 0, 30),
    )
    queued = (QueuedView(13, 50, -1, 99.0, 1), QueuedView(14, 70, 10, 99.5, 1))
    return EngineSnapshot(slots, 2, stats, NOW, queued, speculative=True)


def engine_b() -> EngineSnapshot:
    slots = (SlotView(0, SlotState.DECODE, 21, 10, 11, 20, created=96.0, admitted_at=96.0, first_token_at=97.0),)
    return EngineSnapshot(slots, 0, EngineStats(), NOW)


def view(read_memory=lambda: HostMemory(100 * GB, 60 * GB, 2 * GB), **changes) -> SnapshotView:
    table = build_table("a", kv_bytes_per_token=1000, weights_bytes=GB, compute_bytes=0, memory_bytes=2 * GB,
                        decode_batch=3, slot_ctx=4096, n_ctx_train=8192)
    models = [
        ModelView("a", engine_a(), queue_cap=8, profile="coding", pinned=True, weights_bytes=GB,
                  kv_bytes_per_token=1000, cache_bytes=5000, capacity=table),
        ModelView("b", engine_b(), queue_cap=4, kept=True, weights_bytes=2 * GB, kv_bytes_per_token=10),
        ModelView("c", None, queue_cap=4),  # loading
    ]
    values = {"models": models, "queue": QueueCounters(rejections=3, last_reject_reason="queue full"),
              "governor": MemoryGovernor(10 * GB, floor_bytes=GB, enabled=True), "read_memory": read_memory,
              "now": NOW}
    values.update(changes)
    return SnapshotView(**values)


def test_sections_are_under_server():
    snap = build_snapshot(view())
    assert set(snap) == {"server"}
    assert {"concurrency", "queue", "requests", "resident_models", "governor", "memory", "capacity",
            "rates"} <= set(snap["server"])


def test_concurrency_and_queue_sum_over_the_models():
    server = build_snapshot(view())["server"]
    assert server["concurrency"] == {"decode_batch": 4, "queue_cap": 16, "in_flight": 3, "waiting": 2}
    queue = server["queue"]
    assert queue["waiting"] == 2 and queue["cap"] == 16 and queue["rejections"] == 3
    assert queue["last_reject_reason"] == "queue full" and 2 <= queue["eta_s"] <= 60
    assert build_snapshot(view(queue=QueueCounters(cap=5)))["server"]["queue"]["cap"] == 5


def test_request_rows_queued_first_with_their_fields():
    rows = build_snapshot(view())["server"]["requests"]
    assert [(r["id"], r["state"], r["position"]) for r in rows] == [
        (13, "queued", 1), (14, "queued", 2), (11, "decode", None), (12, "prefill", None), (21, "decode", None)]
    queued, decoding, prefilling = rows[0], rows[2], rows[3]
    assert queued["max_tokens"] is None and rows[1]["max_tokens"] == 10 and queued["elapsed_s"] == 1.0
    assert queued["cache"] is None and queued["speculative"] is None
    assert decoding == {
        "id": 11, "model": "a", "state": "decode", "position": None, "slot": 0, "prompt_tokens": 120,
        "generated": 21, "max_tokens": 64, "elapsed_s": 10.0, "ttft_s": 5.0, "decode_tok_s": 4.0,
        "cache": {"tier": "slot", "warm_tokens": 64},
        "speculative": {"rounds": 0, "drafted": 0, "accepted": 0, "accept_rate": None},
    }
    assert prefilling["ttft_s"] is None and prefilling["decode_tok_s"] is None
    assert rows[4]["speculative"] is None  # model b does not draft


def test_resident_models_carry_flags_and_bytes():
    entries = {e["id"]: e for e in build_snapshot(view())["server"]["resident_models"]}
    a = entries["a"]
    assert (a["profile"], a["pinned"], a["kept"], a["in_flight"], a["waiting"], a["decode_batch"]) == (
        "coding", True, False, 2, 2, 3)
    assert a["kv_bytes"] == 1000 * (140 + 256 + 30) and a["weights_bytes"] == GB
    assert a["kv_allocated_bytes"] == 1000 * 4096 * 3
    assert entries["b"]["kept"] is True and entries["b"]["kv_allocated_bytes"] is None
    assert entries["c"]["loaded"] is False and entries["c"]["in_flight"] is None


def test_memory_governor_and_capacity():
    server = build_snapshot(view())["server"]
    memory = server["memory"]
    assert memory["available_bytes"] == 60 * GB and memory["headroom_bytes"] == 59 * GB
    assert memory["active_bytes"] == memory["process_rss_bytes"] == 2 * GB
    assert memory["weights_bytes"] == 3 * GB and memory["cache_bytes"] == 5000
    assert server["governor"]["band"] == "green" and server["governor"]["enabled"] is True
    assert server["capacity"]["models"]["a"]["max_ctx"] == {"1": 4096, "2": 4096, "3": 4096}
    assert server["capacity"]["models"]["b"] is None and server["capacity"]["overcommit"] is False


def test_a_failing_probe_nulls_only_its_fields():
    def broken():
        raise MemoryProbeError("no /proc")

    server = build_snapshot(view(read_memory=broken))["server"]
    memory = server["memory"]
    assert memory["available_bytes"] is None and memory["total_bytes"] is None and "no /proc" in memory["error"]
    assert memory["weights_bytes"] == 3 * GB  # not from the probe
    assert server["concurrency"]["in_flight"] == 3


def test_a_failing_section_is_nulled_and_the_rest_answers():
    class BrokenGovernor(MemoryGovernor):
        def snapshot(self):
            raise RuntimeError("boom")

    server = build_snapshot(view(governor=BrokenGovernor(None)))["server"]
    assert server["governor"]["band"] is None and "boom" in server["governor"]["error"]
    assert server["memory"]["available_bytes"] == 60 * GB
    assert server["memory"]["headroom_bytes"] == 60 * GB - 512 * 1024**2  # the default floor
    assert server["requests"] and server["rates"]["decode_streams"] == 2
    text = render_prometheus({"server": server})
    assert "mlxcel_governor_band" not in text and "mlxcel_memory_available_bytes" in text


def test_an_engine_that_breaks_nulls_the_sections_reading_it():
    class Broken:
        @property
        def slots(self):
            raise RuntimeError("engine gone")

    bad = view()
    bad.models[1].engine = Broken()
    server = build_snapshot(bad)["server"]
    assert server["concurrency"]["in_flight"] is None and server["requests"] is None
    assert server["governor"]["band"] == "green" and server["capacity"]["models"]["a"] is not None


def test_rates_from_the_engine_snapshot():
    rates = rates_of(engine_a(), NOW)
    assert rates.decode_streams == 1 and rates.decode_tok_s == 4.0  # 20 tokens since 95.0
    assert rates.prefill_tok_s_recent == 300.0  # 600 tokens over 2 s
    assert rates.decode_tok_s_recent == 20.0  # 80 steps over 4 s
    assert rates.decode_tok_s_lifetime == 30.0 and rates.mean_generated_recent == 41.0
    empty = rates_of(EngineSnapshot(), NOW)
    assert empty.decode_tok_s == 0 and empty.prefill_tok_s_recent is None and empty.decode_tok_s_lifetime is None
    total = combine([rates, rates_of(engine_b(), NOW)])
    assert total.decode_streams == 2 and total.decode_tok_s == pytest.approx(4.0 + 10 / 3, abs=0.01)
    assert total.prefill_tok_s_recent == 300.0


def test_recent_keeps_the_last_eight_requests():
    stats = EngineStats()
    for i in range(10):
        stats.record_request(RequestTiming(i, i, 1.0, i, 1.0))
    assert [t.prompt_tokens for t in stats.recent] == list(range(2, 10))


def parse(text: str) -> dict:
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_prometheus_text_parses_with_labels():
    snap = build_snapshot(view())
    samples = parse(render_prometheus(snap))
    assert samples[("mlxcel_concurrency_in_flight", ())] == 3
    assert samples[("mlxcel_queue_eta_s", ())] == snap["server"]["queue"]["eta_s"]
    assert samples[("mlxcel_queue_rejections_total", ())] == 3
    assert samples[("mlxcel_governor_band", (("band", "green"),))] == 1
    assert samples[("mlxcel_governor_band", (("band", "red"),))] == 0
    assert samples[("mlxcel_capacity_max_ctx", (("model", "a"), ("profile", "coding"), ("width", "1")))] == 4096
    assert samples[("mlxcel_resident_model_in_flight", (("model", "a"), ("profile", "coding")))] == 2
    assert samples[("mlxcel_resident_model_in_flight", (("model", "b"),))] == 1
    assert samples[("mlxcel_rates_decode_tok_s", (("model", "b"),))] == pytest.approx(3.33)
    assert samples[("mlxcel_requests_count", (("state", "queued"),))] == 2
    assert not any(name.startswith("mlxcel_requests_") and name != "mlxcel_requests_count" for name, _ in samples)


def test_prometheus_escapes_label_values():
    snap = build_snapshot(view())
    snap["server"]["resident_models"][0]["id"] = 'we"ird\\id\n'
    samples = parse(render_prometheus(snap))
    assert samples[("mlxcel_resident_model_in_flight", (("model", 'we"ird\\id\n'), ("profile", "coding")))] == 2
