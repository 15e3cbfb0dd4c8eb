"""The admission estimate, the "does not fit" messages, the warm prefix and the drain estimate."""

from __future__ import annotations

import pytest

from mlxcel.fleet.estimate import (
    context_too_long,
    drain_eta_s,
    estimate,
    memory_too_long,
    need_bytes,
    queue_wait_s,
    warm_prefix,
)
from mlxcel.turn.errors import PromptTooLong

FIELDS = {"prompt_tokens", "warm_tokens", "cache_tier", "max_tokens", "need_bytes", "fits_now", "fits_drained",
          "context_ok", "context_limit", "est_ttft_s", "resident"}


def base(**overrides):
    values = {"prompt_tokens": 1000, "warm_tokens": 200, "cache_tier": "slot", "max_tokens": None,
              "kv_bytes_per_token": 100, "prefill_transient_bytes": 50_000, "context_limit": 2048,
              "free_bytes": 10**6, "drained_bytes": 10**7, "prefill_tok_s": 400.0, "queue_wait_s": 0.5}
    values.update(overrides)
    return estimate(**values)


def test_need_bytes_is_the_transient_plus_kv_for_prompt_and_max_tokens():
    assert need_bytes(1000, None, 100, 50_000) == 150_000
    assert need_bytes(1000, 500, 100, 50_000) == 200_000
    assert base()["need_bytes"] == 150_000 and base(max_tokens=500)["need_bytes"] == 200_000


def test_the_estimate_carries_003s_fields():
    result = base()
    assert set(result) == FIELDS
    assert result["fits_now"] is True and result["fits_drained"] is True
    assert result["context_ok"] is True and result["context_limit"] == 2048
    assert result["est_ttft_s"] == pytest.approx(0.5 + 800 / 400)
    assert result["resident"] is True


def test_fits_now_and_drained_judge_the_need_separately():
    result = base(free_bytes=100_000, drained_bytes=150_000)
    assert result["fits_now"] is False and result["fits_drained"] is True


def test_context_ok_counts_max_tokens():
    assert base(max_tokens=1048)["context_ok"] is True
    assert base(max_tokens=1049)["context_ok"] is False


def test_unknown_inputs_leave_their_fields_null():
    result = base(kv_bytes_per_token=None, context_limit=None, prefill_tok_s=None, free_bytes=None, resident=False)
    assert result["need_bytes"] is None and result["fits_now"] is None and result["fits_drained"] is None
    assert result["context_ok"] is None and result["est_ttft_s"] is None and result["resident"] is False


def test_warm_tokens_never_exceed_the_prompt_and_none_is_a_miss():
    assert base(warm_tokens=5000)["warm_tokens"] == 1000
    assert base(warm_tokens=0, cache_tier="slot")["cache_tier"] == "miss"


def test_the_warm_prefix_prefers_a_slot_then_the_host_cache():
    prompt = list(range(100))
    assert warm_prefix(prompt, [list(range(40)), list(range(60)) + [7]]) == (60, "slot")
    assert warm_prefix(prompt, [list(range(40))], host_covered=96) == (96, "exact")  # 100 // 16 * 16
    assert warm_prefix(prompt, [], host_covered=64) == (64, "block")
    assert warm_prefix(prompt, [[5, 6]]) == (0, "miss")
    assert warm_prefix(prompt, [prompt]) == (99, "slot")  # the last token is always computed


def test_both_too_long_messages_start_alike_and_carry_the_numbers():
    context = context_too_long(3000, 500, 2048)
    assert context.startswith("prompt is too long")
    assert "3000" in context and "500" in context and "2048" in context and "exceeds the context window" in context
    assert "max_tokens" not in context_too_long(3000, None, 2048)
    memory = memory_too_long(5 * 2**30, 2**30)
    assert memory.startswith("prompt is too long")
    assert str(5 * 2**30) in memory and str(2**30) in memory


def test_the_typed_error_carries_the_numbers_and_the_same_message():
    error = PromptTooLong(3000, 500, 2048)
    assert error.message == context_too_long(3000, 500, 2048)
    assert error.code == "context_length_exceeded"
    assert error.extra == {"n_prompt_tokens": 3000, "max_tokens": 500, "n_ctx": 2048}


def test_drain_eta_divides_the_queued_work_by_the_decode_rate():
    # 6 waiting x 200 tokens over 4 streams of 10 tok/s: 30 s
    assert drain_eta_s(6, 4, 10.0, 200.0) == 30
    assert drain_eta_s(1, 4, 100.0, 10.0) == 2  # clamped up
    assert drain_eta_s(100, 1, 1.0, 1000.0) == 60  # clamped down
    assert drain_eta_s(0, 4, 10.0, 200.0) == 2
    assert drain_eta_s(3, 0, None, None) == 15  # nothing measured: 5 s a request
    assert drain_eta_s(3, 2, 0.0, 100.0) == 15


def test_queue_wait_counts_the_requests_ahead():
    assert queue_wait_s(0, 1, 3, 10.0, 100.0) == 0.0  # a free slot
    assert queue_wait_s(2, 0, 4, 10.0, 100.0) == 7.5  # 3 to finish: 300 tokens at 40 tok/s
    assert queue_wait_s(1, 0, 1, None, None) == 10.0
