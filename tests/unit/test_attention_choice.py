"""-fa auto on a CPU: the choice between flash and plain attention from their timings."""

import json

import llama_cpp
import pytest

from mlxcel.engine import attention_choice
from mlxcel.engine.attention_choice import KernelTimes, choose, decide, plain_scores_bytes, probe_needed, typical_depth
from mlxcel.engine.core_share import Contended

# the shape measured on a 2-core Zen 3 with SmolLM2-135M: flash's decode step grows
# with depth about three times as fast, prefill alike
FLASH = KernelTimes(prefill_per_token=0.0060, step_shallow=0.0117, step_deep=0.0200, depth=768)
PLAIN = KernelTimes(prefill_per_token=0.0061, step_shallow=0.0120, step_deep=0.0150, depth=768)


def test_a_decode_step_grows_linearly_with_depth_from_the_two_measured_steps():
    assert FLASH.step_at(0) == pytest.approx(0.0117)
    assert FLASH.step_at(768) == pytest.approx(0.0200)
    assert FLASH.step_at(1536) == pytest.approx(0.0283)
    flat = KernelTimes(0.006, 0.012, 0.011, 768)  # a noisy deep step below the shallow one
    assert flat.step_at(4096) == pytest.approx(0.012)


def test_plain_attention_wins_where_its_steps_at_depth_are_cheaper():
    assert not choose(FLASH, PLAIN, 2048)
    # near the start the kernels cost the same: flash, llama.cpp's own choice, stays
    assert choose(FLASH, PLAIN, 16)


def test_plain_attention_much_dearer_near_the_start_is_not_chosen_for_its_gain_at_depth():
    # SmolLM2-135M on the Zen 3: plain's extra graph nodes cost more than its kernel saves
    # until ~500 tokens; short chats must not pay for long ones
    flash = KernelTimes(0.00524, 0.00804, 0.01734, 768)
    plain = KernelTimes(0.00565, 0.01193, 0.01542, 768)
    assert plain.request_cost(2048) < 0.9 * flash.request_cost(2048)
    assert choose(flash, plain, 2048)


def test_plain_steps_count_as_served_so_a_small_gain_at_a_short_slot_keeps_flash():
    # Qwen2.5-0.5B on the Zen 3, as its probe timed it: plain 2.7 % dearer a step near the
    # start, cheaper at depth. A 2,048-token slot (-c 8192 -np 4): the 5 % the probe showed
    # is eaten by plain's served step cost (bench/run.py decode: 15 % slower), flash stays;
    # a 16,384-token slot: plain wins by far at its typical depth, and is chosen
    flash = KernelTimes(0.010363, 0.028508, 0.032347, 768)
    plain = KernelTimes(0.010263, 0.029281, 0.029885, 768)
    assert plain.request_cost(1024) < (1 - attention_choice.MIN_GAIN) * flash.request_cost(1024)
    assert choose(flash, plain, typical_depth(2048))
    assert not choose(flash, plain, typical_depth(16384))


def test_a_tie_or_a_small_gain_keeps_flash_attention():
    close = KernelTimes(0.0060, 0.0117, 0.0195, 768)  # under 5 % cheaper
    assert choose(FLASH, close, 2048)
    assert choose(FLASH, FLASH, 2048)


def test_slow_flash_prefill_alone_can_decide():
    # Arm Neoverse V (llama.cpp issue 27086): flash prefill at half speed, decode alike
    flash = KernelTimes(0.0020, 0.010, 0.012, 768)
    plain = KernelTimes(0.0010, 0.010, 0.012, 768)
    assert not choose(flash, plain, 2048)


def test_the_typical_depth_is_half_a_slot_within_bounds():
    assert typical_depth(4096) == 2048
    assert typical_depth(256) == 512
    assert typical_depth(131072) == 8192


def test_only_a_cpu_model_with_a_plain_readable_v_cache_is_probed():
    assert probe_needed(0, "f16")
    assert not probe_needed(0, "q8_0")  # a quantized V cache needs flash attention
    if llama_cpp.llama_supports_gpu_offload():
        assert not probe_needed(99, "f16")
    else:  # a CPU build: -ngl changes nothing, every layer is on the CPU
        assert probe_needed(99, "f16")


def test_saved_timings_are_read_back_without_touching_the_model(tmp_path):
    path = tmp_path / "attention.json"
    path.write_text(json.dumps({"flash": FLASH.to_dict(), "plain": PLAIN.to_dict()}))
    chosen, why = decide(None, None, path, 2048, 2)
    assert chosen == llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    assert why.startswith("off (timed at an earlier start") and "2048 tokens" in why
    chosen, why = decide(None, None, path, 16, 2)
    assert chosen == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED and why.startswith("on")


@pytest.mark.parametrize("text", ["not json", "[]", '{"flash": {}}',
                                  '{"flash": {"prefill_per_token": 0, "step_shallow": 1, "step_deep": 1},'
                                  ' "plain": {"prefill_per_token": 1, "step_shallow": 1, "step_deep": 1}}'])
def test_unreadable_or_senseless_timings_are_measured_again(tmp_path, monkeypatch, text):
    path = tmp_path / "attention.json"
    path.write_text(text)
    timed = []

    def fake_time(model, params, flash, threads):
        timed.append(flash)
        return FLASH if flash else PLAIN

    monkeypatch.setattr(attention_choice, "time_kernel", fake_time)
    chosen, why = decide(object(), object(), path, 2048, 2)
    assert timed == [True, False] and chosen == llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    assert "timed now" in why
    saved = json.loads(path.read_text())
    assert KernelTimes.from_dict(saved["plain"]) == PLAIN  # kept for the next start


def test_timings_taken_against_other_work_leave_llama_cpp_to_decide_and_are_not_kept(tmp_path, monkeypatch):
    def contended(model, params, flash, threads):
        raise Contended("the compute threads had 55% of their cores")

    monkeypatch.setattr(attention_choice, "time_kernel", contended)
    path = tmp_path / "attention.json"
    chosen, why = decide(object(), object(), path, 2048, 2)
    assert chosen == llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO and "55%" in why
    assert not path.exists()


def test_plain_attention_whose_scores_would_take_much_of_the_memory_is_not_even_timed(tmp_path, monkeypatch):
    monkeypatch.setattr(attention_choice, "time_kernel", lambda *args: pytest.fail("timed"))
    path = tmp_path / "attention.json"
    path.write_text(json.dumps({"flash": FLASH.to_dict(), "plain": PLAIN.to_dict()}))  # timings that pick plain
    scores = plain_scores_bytes(512, 32768, 32)  # a 7-8B model's 32 query heads, one 32,768-token slot
    assert scores == 4 * 2**30
    chosen, why = decide(None, None, path, 8192, 2, scores, 16 * 2**30)
    assert chosen == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert "4096 MiB" in why and "1/8" in why and "not timed" in why
    chosen, why = decide(None, None, path, 8192, 2, scores, 64 * 2**30)  # room enough: the timings decide
    assert chosen == llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED and "earlier start" in why
    chosen, _ = decide(None, None, path, 8192, 2, scores, 0)  # the memory unknown: the timings decide
    assert chosen == llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED


def test_the_scores_grow_with_the_micro_batch_the_slot_and_the_heads():
    base = plain_scores_bytes(512, 2048, 14)
    assert plain_scores_bytes(1024, 2048, 14) == plain_scores_bytes(512, 4096, 14) == 2 * base
    assert plain_scores_bytes(512, 2048, 28) == 2 * base
