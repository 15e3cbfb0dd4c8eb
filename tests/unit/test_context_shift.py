"""The end of a slot's context over the fake runtime: without context shift generation
stops there (truncated, as llama-server reports it); with it, the oldest tokens past
n_keep are dropped and generation goes on over what the sequence still holds; a
shifted sequence leaves only its exact prefix for later prompts."""

from __future__ import annotations

import pytest

from mlxcel.engine.request import FinishReason
from tests.unit.fake_runtime import Model, history_hash, successor
from tests.unit.test_engine import make_rig  # noqa: F401 - the fixture

pytestmark = pytest.mark.timeout(30)

N_CTX = 16


def shifted_tokens(model: Model, prompt: list[int], n: int, n_keep: int, n_discard: int = 0) -> list[int]:
    """What `n` generated tokens are when each shift happens where llama-server's does:
    before a token would take the context's last cell."""
    history, token, out = list(prompt), model(prompt), []
    out.append(token)
    while len(out) < n:
        if len(history) + 1 >= N_CTX:
            keep = min(N_CTX - 4, len(prompt) if n_keep < 0 else n_keep)
            n_left = len(history) - keep
            drop = max(0, min(n_discard or n_left // 2, n_left - 1))
            del history[keep : keep + drop]
        history.append(token)
        token = model(history)
        out.append(token)
    return out


def test_without_context_shift_generation_stops_at_the_context_end_truncated(make_rig):  # noqa: F811
    rig = make_rig(n_parallel=1, n_ctx_seq=N_CTX)
    prompt = list(range(10, 20))
    events = rig.submit(prompt, max_tokens=100, ignore_eos=True)
    finish = events.wait()
    assert finish.reason is FinishReason.LENGTH and finish.truncated
    assert len(events.token_ids) == N_CTX - len(prompt)  # llama-server's count: n_ctx - n_prompt
    assert rig.runtime.shifts == []


def test_a_limit_reached_before_the_context_end_is_not_truncated(make_rig):  # noqa: F811
    rig = make_rig(n_parallel=1, n_ctx_seq=N_CTX)
    finish = rig.submit([10, 11], max_tokens=3, ignore_eos=True).wait()
    assert finish.reason is FinishReason.LENGTH and not finish.truncated


@pytest.mark.parametrize("n_keep, n_discard", [(0, 0), (3, 0), (-1, 0), (2, 5)])
def test_context_shift_goes_on_over_the_shifted_history(make_rig, n_keep, n_discard):  # noqa: F811
    rig = make_rig(n_parallel=1, n_ctx_seq=N_CTX, model=history_hash, context_shift=True)
    prompt = list(range(1, 7))
    events = rig.submit(prompt, max_tokens=40, ignore_eos=True, n_keep=n_keep, n_discard=n_discard)
    finish = events.wait()
    assert finish.reason is FinishReason.LENGTH and finish.truncated
    assert events.token_ids == shifted_tokens(history_hash, prompt, 40, n_keep, n_discard)
    assert len(rig.runtime.shifts) >= 3
    kept = len(prompt) if n_keep < 0 else n_keep
    assert {shift[1] for shift in rig.runtime.shifts} == {kept}
    # every position stayed inside the slot (the fake records any past n_ctx_seq as a violation)
    assert max(p for batch in rig.runtime.batches for p in batch.positions) < N_CTX


def test_a_shifted_sequence_leaves_only_its_kept_prefix_for_reuse(make_rig):  # noqa: F811
    rig = make_rig(n_parallel=1, n_ctx_seq=N_CTX, model=history_hash, context_shift=True)
    prompt = list(range(1, 7))
    rig.submit(prompt, max_tokens=30, ignore_eos=True, n_keep=3).wait()
    assert rig.runtime.memory[0] == prompt[:3]
    again = rig.submit(prompt, max_tokens=4, ignore_eos=True)
    assert again.wait().cached_tokens == 3
    assert again.token_ids == shifted_tokens(history_hash, prompt, 4, 0)  # no shift needed: plain tokens


def periodic(history: list[int]) -> int:
    return history[-4]


def test_speculation_stops_drafting_once_the_context_shifted(make_rig):  # noqa: F811
    rig = make_rig(n_parallel=1, n_ctx_seq=N_CTX, model=periodic, context_shift=True, lookup_ngram=2,
                   lookup_max=4, draft_min=1)
    prompt = [1, 2, 3, 4, 1, 2, 3, 4]
    events = rig.submit(prompt, max_tokens=30, ignore_eos=True)
    finish = events.wait()
    assert events.token_ids == shifted_tokens(periodic, prompt, 30, 0)
    assert finish.truncated and rig.runtime.shifts and finish.timings.draft_n > 0  # it drafted before
    ends = [max(batch.positions) for batch in rig.runtime.batches]
    first_shifted = next(i for i in range(1, len(ends)) if ends[i] < ends[i - 1])
    assert all(len(batch.tokens) == 1 for batch in rig.runtime.batches[first_shifted:])  # nothing drafted


def test_context_shift_keeps_a_successor_model_exact(make_rig):  # noqa: F811
    rig = make_rig(n_parallel=2, n_ctx_seq=N_CTX, model=successor, context_shift=True)
    a = rig.submit([10, 11, 12], max_tokens=50, ignore_eos=True)
    b = rig.submit([400, 401], max_tokens=20, ignore_eos=True)
    assert a.wait().reason is FinishReason.LENGTH and b.wait().reason is FinishReason.LENGTH
    assert a.token_ids == list(range(13, 63)) and b.token_ids == list(range(402, 422))
