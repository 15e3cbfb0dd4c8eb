"""The boot capacity table and the capacity plan (003's ok / admit_now / reason)."""

from __future__ import annotations

import pytest

from mlxcel.fleet.capacity import OVERCOMMIT_ENV, build_table, depths_for, max_context_at_width_1, plan, widths_for

KB = 1024
MB = 1024 * KB


def table(memory_bytes=1000 * MB, decode_batch=4, slot_ctx=8192, n_ctx_train=32768, kv=100 * KB):
    return build_table("m", kv_bytes_per_token=kv, weights_bytes=300 * MB, compute_bytes=100 * MB,
                       memory_bytes=memory_bytes, decode_batch=decode_batch, slot_ctx=slot_ctx,
                       n_ctx_train=n_ctx_train)


def test_widths_stop_at_the_decode_width_and_include_it():
    assert widths_for(4) == [1, 2, 4]
    assert widths_for(6) == [1, 2, 4, 6]
    assert widths_for(64) == [1, 2, 4, 8, 16, 32, 64]
    assert widths_for(1) == [1]


def test_depths_run_up_to_the_trained_context():
    assert depths_for(8192) == [1024, 4096, 8192]
    assert depths_for(131072) == [1024, 4096, 8192, 16384, 32768, 65536, 131072]
    assert depths_for(10000) == [1024, 4096, 8192, 10000]


def test_memory_divides_between_streams_and_the_slot_context_caps_each():
    t = table()  # 600 MB of KV at 100 KB a token: 6144 tokens in all
    assert t.kv_budget_bytes == 600 * MB and t.kv_tokens == 6144
    assert t.max_ctx == {1: 6144, 2: 3072, 4: 1536}
    assert table(memory_bytes=100_000 * MB).max_ctx == {1: 8192, 2: 8192, 4: 8192}  # the slot's cells
    assert table(memory_bytes=100_000 * MB, slot_ctx=65536, n_ctx_train=4096).max_ctx[1] == 4096  # trained window
    assert t.max_width_at_depth == {1024: 4, 4096: 1, 8192: 0, 16384: 0, 32768: 0}


def test_a_model_that_does_not_fit_has_no_room_for_context():
    t = table(memory_bytes=200 * MB)
    assert t.kv_budget_bytes == 0 and t.max_ctx == {1: 0, 2: 0, 4: 0}
    with pytest.raises(ValueError):
        table(kv=0)


def test_the_table_serialises_with_its_byte_budgets():
    data = table().to_dict()
    assert data["max_ctx"] == {"1": 6144, "2": 3072, "4": 1536}
    assert data["bytes"]["kv_budget"] == 600 * MB and data["bytes"]["kv_per_token"] == 100 * KB
    assert data["bytes"]["kv_slots"] == 100 * KB * 8192 * 4


def test_plan_reads_the_smallest_tabulated_width_at_or_above():
    t = table()
    p = plan(t, 3, 1536, free_slots=4, waiting=0)  # width 3 reads width 4: 1536 tokens
    assert (p.ok, p.admit_now, p.reason, p.max_context_at_width) == (True, True, "ok", 1536)
    p = plan(t, 3, 1537, free_slots=4, waiting=0)
    assert p.ok is False and p.admit_now is False
    assert p.reason == "depth 1537 exceeds max context 1536 at width 3"


def test_plan_past_the_decode_width_does_not_fit():
    p = plan(table(), 5, 100, free_slots=4, waiting=0)
    assert p.ok is False and p.reason == "width 5 exceeds the decode width 4"


def test_admit_now_needs_a_calm_governor_an_empty_queue_and_free_slots():
    t = table()
    assert plan(t, 2, 100, 4, 0, "orange").reason == "governor orange"
    assert plan(t, 2, 100, 4, 0, "red").admit_now is False
    p = plan(t, 2, 100, 4, 3)
    assert (p.ok, p.admit_now, p.reason) == (True, False, "3 waiting for a slot")
    p = plan(t, 2, 100, 1, 0)
    assert p.reason == "1 free slot(s) of 4, need 2"


def test_a_yellow_band_counts_one_free_slot():
    t = table()
    assert plan(t, 1, 100, 4, 0, "yellow").admit_now is True
    p = plan(t, 2, 100, 4, 0, "yellow")
    assert p.admit_now is False and p.reason.startswith("1 free slot(s) of 4, need 2")


def test_the_first_failing_condition_is_the_reason():
    p = plan(table(), 4, 5000, 0, 2, "red")
    assert p.reason == "depth 5000 exceeds max context 1536 at width 4"
    p = plan(table(), 4, 100, 0, 2, "red")
    assert p.reason == "governor red"


def test_without_a_table_or_under_overcommit_only_timing_counts(monkeypatch):
    p = plan(None, 2, 10**6, 4, 0)
    assert (p.ok, p.admit_now, p.reason) == (None, True, "ok")
    assert plan(None, 8, 100, 4, 0, decode_batch=4).reason == "4 free slot(s) of 4, need 8"
    monkeypatch.setenv(OVERCOMMIT_ENV, "1")
    p = plan(table(), 2, 10**6, 4, 0)
    assert p.ok is None and p.admit_now is True
    assert max_context_at_width_1(table()) is None


def test_max_context_at_width_1():
    assert max_context_at_width_1(table()) == 6144
    assert max_context_at_width_1(None) is None


@pytest.mark.parametrize("width, depth", [(0, 10), (1, 0), (-1, 5)])
def test_plan_refuses_non_positive_numbers(width, depth):
    with pytest.raises(ValueError):
        plan(table(), width, depth, 4, 0)
