"""A chain run on the few tokens that can survive its top-k cut must pick, draw for
draw, what it picks on the whole vocabulary; and the cut must be found where it is."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlxcel.engine.narrowing import Narrowing
from mlxcel.engine.sampling import SamplerChain, SamplingParams
from mlxcel.engine.top_logits import at_least_top

N_VOCAB = 8000


@pytest.mark.parametrize("n", [257, 1000, 49_152, 151_936])
@pytest.mark.parametrize("k", [1, 7, 40, 104])
def test_at_least_top_holds_the_k_largest(n, k):
    rng = np.random.default_rng(n + k)
    for coarse in (False, True):
        logits = (rng.standard_normal(n) * 3).astype(np.float32)
        if coarse:  # many ties, the k-th among them
            logits = np.round(logits)
        ids = at_least_top(logits, k)
        assert np.all(np.diff(ids) > 0)  # ascending, no repeats
        kth = np.sort(logits)[n - k]
        assert set(np.flatnonzero(logits > kth)) <= set(ids.tolist())
        assert np.count_nonzero(logits[ids] >= kth) >= k
        assert ids.shape[0] >= k


def test_a_row_masked_below_k_finite_logits_gives_every_id():
    logits = np.full(5000, -np.inf, dtype=np.float32)
    logits[[3, 4000]] = 1.0
    assert at_least_top(logits, 10).shape[0] == 5000


def _logits(rng, recent: list[int]) -> np.ndarray:
    """Random logits whose largest are the recently drawn tokens, so the penalties
    push them out and tokens from further down the raw order come in."""
    logits = (rng.standard_normal(N_VOCAB) * 2).astype(np.float32)
    if recent:
        logits[recent] = 9.0 + rng.random(len(recent)).astype(np.float32)
    return logits


CHAINS = [
    dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    dict(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05, repeat_penalty=1.1),
    dict(temperature=1.0, top_k=8, repeat_penalty=4.0, presence_penalty=3.0, frequency_penalty=1.0,
         repeat_last_n=32),
    dict(temperature=1.0, top_k=5, logit_bias={7: 30.0, 11: -4.0}),  # 7 has the row's lowest logit
    dict(temperature=0.0, repeat_penalty=3.0, repeat_last_n=16),  # greedy keeps its top 1
    dict(temperature=0.0, logit_bias={7: 30.0}),
    dict(temperature=0.9, top_k=40, xtc_probability=0.5, xtc_threshold=0.05),
]


@pytest.mark.parametrize("params", CHAINS)
def test_the_narrowed_chain_draws_what_the_whole_vocabulary_chain_draws(params):
    narrowed = SamplerChain(SamplingParams(seed=1234, **params), None, N_VOCAB, 512)
    whole = SamplerChain(SamplingParams(seed=1234, **params), None, N_VOCAB, 512)
    assert narrowed.narrowing is not None
    whole.narrowing = None
    rng = np.random.default_rng(5)
    prompt = rng.integers(0, N_VOCAB, 40).tolist()
    for chain in (narrowed, whole):
        chain.prime(prompt)
    history = list(prompt)
    try:
        for _ in range(150):
            logits = _logits(rng, history[-24:])
            if "logit_bias" in params:
                logits[7] = logits.min() - 1.0
            ours = narrowed.sample_with_probs(logits.copy(), 5)
            theirs = whole.sample_with_probs(logits.copy(), 5)
            assert ours[0] == theirs[0]
            assert ours[1] == pytest.approx(theirs[1])
            assert [t for t, _ in ours[2]] == [t for t, _ in theirs[2]]
            history.append(ours[0])
        if "logit_bias" in params:
            assert 7 in history[len(prompt):]  # the bias lifted it from the bottom of the row
    finally:
        narrowed.free()
        whole.free()


def test_the_candidate_set_counts_what_the_penalties_window_holds():
    narrowing = Narrowing(k=3, biased=[900], window=4)
    for token in (5, 6, 5, 7, 8, 9):
        narrowing.accepted(token)
    logits = -10.0 - np.random.default_rng(0).random(N_VOCAB).astype(np.float32)
    logits[[100, 101, 102, 103, 104, 105, 106, 107, 108]] = np.arange(9, 0, -1)
    ids = narrowing.candidate_ids(logits).tolist()
    # the window holds 5, 7, 8, 9 (the first 5 and the 6 left it): 3 + 5 touched = the top 8
    assert {5, 7, 8, 9, 900} <= set(ids) and 6 not in ids
    assert set(range(100, 108)) <= set(ids)
    assert len(ids) < N_VOCAB // 16


@pytest.mark.parametrize("row", ["random", "ties", "nan", "masked"])
def test_the_candidate_set_is_the_top_ids_and_the_touched_ones_ascending_and_once(row):
    """The touched ids are marked in the row's mask, not merged by a sort: the set must
    still be exactly what at_least_top gives for k + touched, with every biased and
    windowed id added once, in ascending order, whatever the row holds."""
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(49_152).astype(np.float32) * 3
    if row == "ties":
        logits = np.round(logits)
    elif row == "nan":
        logits[rng.integers(0, logits.shape[0], 50)] = np.nan
    elif row == "masked":  # a grammar mask left 30 tokens: fewer than k + touched are finite
        logits[:] = -np.inf
        logits[rng.choice(logits.shape[0], 30, replace=False)] = rng.standard_normal(30)
    window = [int(t) for t in rng.integers(0, logits.shape[0], 64)]
    narrowing = Narrowing(k=40, biased=[7, 49_151], window=64)
    for token in window:
        narrowing.accepted(token)
    touched = {7, 49_151, *window}
    ids = narrowing.candidate_ids(logits)
    expected = sorted(set(at_least_top(logits, 40 + 2 + len(set(window))).tolist()) | touched)
    assert ids.tolist() == expected


@pytest.mark.parametrize("before, tokens", [
    ((), [5, 6, 5, 7, 8, 9, 5]),  # a prompt longer than the window
    ((), [5, 6]),
    ((1, 2, 1), [3, 1, 4]),  # some history first: the oldest leave
    ((1, 2, 1, 3), []),
])
def test_accepting_a_prompt_at_once_leaves_the_window_one_by_one_does(before, tokens):
    one_by_one, at_once = Narrowing(k=3, biased=(), window=4), Narrowing(k=3, biased=(), window=4)
    for token in before:
        one_by_one.accepted(token)
        at_once.accepted(token)
    for token in tokens:
        one_by_one.accepted(token)
    at_once.accepted_all(tokens)
    assert list(at_once._recent) == list(one_by_one._recent)
    assert at_once._counts == one_by_one._counts
    assert all(n > 0 for n in at_once._counts.values())


def test_a_set_too_large_a_share_of_the_vocabulary_runs_on_every_token():
    narrowing = Narrowing(k=40, biased=(), window=N_VOCAB)
    for token in range(N_VOCAB // 16):
        narrowing.accepted(token)
    assert narrowing.candidate_ids(np.zeros(N_VOCAB, dtype=np.float32)) is None


@pytest.mark.parametrize("params, narrowed", [
    (dict(temperature=0.8), True),
    (dict(temperature=0.8, repeat_penalty=1.2, logit_bias={3: 1.0}), True),
    (dict(temperature=0.0, repeat_penalty=1.2), True),
    (dict(temperature=0.8, top_k=0), False),  # no cut: top-p reads every token
    (dict(temperature=0.8, top_n_sigma=1.5), False),  # reads the whole row before top-k
    (dict(temperature=0.8, mirostat=2), False),
    (dict(temperature=0.8, samplers=("temperature", "top_k")), False),
    (dict(temperature=0.0), False),  # plain greedy: numpy's argmax, no chain
])
def test_the_cut_is_found_only_where_nothing_before_it_reads_the_whole_vocabulary(params, narrowed):
    chain = SamplerChain(SamplingParams(**params), None, N_VOCAB, 64)
    try:
        assert (chain.narrowing is not None) is narrowed
    finally:
        chain.free()


def test_priming_fills_the_penalties_window_with_the_prompts_last_text_tokens():
    # greedy with a crushing penalty over the last 4 tokens: tokens 2-5 lead the row, but
    # the window holds them, so token 1 (primed too early to count) wins
    params = SamplingParams(temperature=0.0, repeat_penalty=100.0, repeat_last_n=4)
    logits = np.zeros(N_VOCAB, dtype=np.float32)
    logits[1], logits[2:6] = 10.0, 11.0
    for narrowed in (True, False):
        chain = SamplerChain(params, None, N_VOCAB, 64)
        if not narrowed:
            chain.narrowing = None
        try:
            chain.prime([1, 2, -9, 3, -8, 4, 5])  # negative ids are media stand-ins
            assert chain.sample_with_probs(logits.copy(), 0)[0] == 1
        finally:
            chain.free()
    unprimed = SamplerChain(params, None, N_VOCAB, 64)
    assert unprimed.sample_with_probs(logits.copy(), 0)[0] == 2
    unprimed.free()


@pytest.mark.parametrize("shares", [(), (2,), (2, 3), (6,), (100,)])
def test_a_prompt_primed_a_share_at_a_time_comes_before_what_the_chain_accepts_next(shares):
    # window 4 and a crushing penalty: the prompt 1-6, then a forced 7, leave 4-7 in the
    # window, so 3 is the best unpenalized token (in any other order, 7 or 6 would win)
    params = SamplingParams(temperature=0.0, repeat_penalty=100.0, repeat_last_n=4)
    logits = np.zeros(N_VOCAB, dtype=np.float32)
    logits[1:8] = 10.0 + np.arange(1, 8)
    for narrowed in (True, False):
        chain = SamplerChain(params, None, N_VOCAB, 64)
        if not narrowed:
            chain.narrowing = None
        try:
            chain.prime([1, 2, 3, 4, 5, 6])
            for share in shares:
                chain.prime_some(share)
            assert chain.priming is (sum(shares) < 4)  # the window keeps the last 4 of the prompt
            chain.accept(7)
            assert not chain.priming
            assert chain.sample_with_probs(logits.copy(), 0)[0] == 3
        finally:
            chain.free()


def test_a_chain_without_history_samplers_is_not_primed():
    chain = SamplerChain(SamplingParams(temperature=0.8, logit_bias={1: -math.inf}), None, N_VOCAB, 64)
    assert chain.history == 0
    chain.free()
