"""A chain run on the few tokens that can survive its top-k cut must pick, draw for
draw, what it picks on the whole vocabulary; and the cut must be found where it is."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from mlxcel.engine import _topset, llama_runtime
from mlxcel.engine.candidates import TOKEN_DATA
from mlxcel.engine.narrowing import Narrowing
from mlxcel.engine.sampling import SamplerChain, SamplingParams
from mlxcel.engine.top_logits import at_least_top
from tests.unit.test_greedy_argmax import CTX, Rows

N_VOCAB = 8000
NO_IDS = np.zeros(0, dtype=np.int32)


def candidate_ids(narrowing: Narrowing, logits: np.ndarray, room: int | None = None) -> list[int] | None:
    """The set a Narrowing writes for this row (its ids), None where it gives none;
    also checks what it wrote beside the ids: each id's logit and p 0."""
    entries = np.zeros(logits.shape[0] if room is None else room, dtype=TOKEN_DATA)
    n = narrowing.fill(logits, entries)
    if n is None:
        return None
    written = entries[:n]
    assert np.array_equal(written["logit"], logits[written["id"]])
    assert not written["p"].any()
    return written["id"].tolist()


def brute_force_set(logits: np.ndarray, k: int, touched: set[int]) -> list[int]:
    """Every id whose logit is >= the (k + touched)-th largest, and the touched ones."""
    m = k + len(touched)
    mth = np.sort(logits)[logits.shape[0] - m]
    return sorted(set(np.flatnonzero(logits >= mth).tolist()) | touched)


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


def _twin_chains(params: dict, seed: int, rng_seed: int):
    """The same chain twice, primed with the same 40-token prompt: one narrowed, one on
    the whole vocabulary; with the random source of the rows and the history so far."""
    narrowed = SamplerChain(SamplingParams(seed=seed, **params), None, N_VOCAB, 512)
    whole = SamplerChain(SamplingParams(seed=seed, **params), None, N_VOCAB, 512)
    assert narrowed.narrowing is not None
    whole.narrowing = None
    rng = np.random.default_rng(rng_seed)
    prompt = rng.integers(0, N_VOCAB, 40).tolist()
    for chain in (narrowed, whole):
        chain.prime(prompt)
    return narrowed, whole, rng, list(prompt)


@pytest.mark.parametrize("params", CHAINS)
def test_the_narrowed_chain_draws_what_the_whole_vocabulary_chain_draws(params):
    narrowed, whole, rng, history = _twin_chains(params, seed=1234, rng_seed=5)
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
            assert 7 in history[40:]  # past the prompt: the bias lifted it from the bottom of the row
    finally:
        narrowed.free()
        whole.free()


def test_the_candidate_set_counts_what_the_penalties_window_holds():
    narrowing = Narrowing(k=3, biased=[900], window=4)
    for token in (5, 6, 5, 7, 8, 9):
        narrowing.accepted(token)
    logits = -10.0 - np.random.default_rng(0).random(N_VOCAB).astype(np.float32)
    logits[[100, 101, 102, 103, 104, 105, 106, 107, 108]] = np.arange(9, 0, -1)
    ids = candidate_ids(narrowing, logits)
    # the window holds 5, 7, 8, 9 (the first 5 and the 6 left it): 3 + 5 touched = the top 8
    assert {5, 7, 8, 9, 900} <= set(ids) and 6 not in ids
    assert set(range(100, 108)) <= set(ids)
    assert len(ids) < N_VOCAB // 16


@pytest.mark.parametrize("row", ["random", "ties", "infinite", "few-distinct"])
@pytest.mark.parametrize("n_vocab", [49_152, 151_936])
def test_the_candidate_set_is_the_top_ids_and_the_touched_ones_ascending_and_once(row, n_vocab):
    """Every id at or above the (k + touched)-th largest logit, each biased and windowed
    id once, ascending, whatever the row holds: the chain's top k can come from
    nowhere else."""
    rng = np.random.default_rng(3)
    logits = rng.standard_normal(n_vocab).astype(np.float32) * 3
    if row == "ties":
        logits = np.round(logits)
    elif row == "infinite":  # a grammar mask and a +inf bias
        logits[rng.choice(n_vocab, n_vocab // 2, replace=False)] = -np.inf
        logits[11] = np.inf
    elif row == "few-distinct":  # ties far past k: the set holds all that tie the m-th
        logits = rng.integers(0, 40, n_vocab).astype(np.float32)
    window = [int(t) for t in rng.integers(0, n_vocab, 64)]
    narrowing = Narrowing(k=40, biased=[7, n_vocab - 1], window=64)
    for token in window:
        narrowing.accepted(token)
    expected = brute_force_set(logits, 40, {7, n_vocab - 1, *window})
    ids = candidate_ids(narrowing, logits)
    if len(expected) > n_vocab // 16 * 2:
        assert ids is None or ids == expected
    else:
        assert ids == expected


@pytest.mark.parametrize("row", ["nan", "masked"])
def test_a_row_the_set_cannot_be_told_of_gives_none(row):
    """A NaN, or fewer finite logits than k + touched (a grammar mask left 30 tokens):
    the chain runs on the whole row."""
    rng = np.random.default_rng(4)
    logits = rng.standard_normal(49_152).astype(np.float32)
    if row == "nan":
        logits[rng.integers(0, logits.shape[0], 5)] = np.nan
    else:
        logits[:] = -np.inf
        logits[rng.choice(logits.shape[0], 30, replace=False)] = rng.standard_normal(30)
    narrowing = Narrowing(k=40, biased=[7], window=64)
    for token in (1, 2, 3):
        narrowing.accepted(token)
    assert candidate_ids(narrowing, logits) is None


@pytest.mark.parametrize("seed", range(40))
def test_the_set_matches_a_brute_force_on_random_shapes(seed):
    """Small and odd vocabularies, k from 1 up, windows with repeats, biases out of
    range (dropped), duplicate biases: the C selection against a sort."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(17, 5000))
    k = int(rng.integers(1, max(2, n // 40)))
    logits = (rng.standard_normal(n) * rng.choice([0.5, 3.0, 30.0])).astype(np.float32)
    if seed % 3 == 0:
        logits = np.round(logits)
    biased = [int(t) for t in rng.integers(0, n, int(rng.integers(0, 4)))]
    narrowing = Narrowing(k=k, biased=[*biased, *biased[:1]], window=int(rng.integers(0, 12)))
    for token in rng.integers(0, n, 20).tolist():
        narrowing.accepted(token)
    touched = set(biased) | set(narrowing._counts)
    ids = candidate_ids(narrowing, logits)
    m = k + len(touched)
    block = max(1, min(256, n // (4 * m)))
    if m > int(n / 16) or -(-n // block) <= m:  # too large a share, or too few blocks to cut
        assert ids is None
    else:
        assert ids == brute_force_set(logits, k, touched)


def test_a_set_larger_than_its_room_gives_none():
    logits = np.zeros(49_152, dtype=np.float32)  # every id ties the k-th
    narrowing = Narrowing(k=40, biased=(), window=0)
    assert candidate_ids(narrowing, logits, room=6144) is None
    logits[100:140] = 1.0
    assert candidate_ids(narrowing, logits, room=6144) == list(range(100, 140))


@pytest.mark.parametrize("args, error", [
    ((np.zeros(100, np.float64), 4, 10, NO_IDS, NO_IDS, np.zeros(10, TOKEN_DATA)), ValueError),
    ((np.zeros(100, np.float32), 4, 10, np.zeros(2, np.int64), NO_IDS, np.zeros(10, TOKEN_DATA)), ValueError),
    ((np.zeros(100, np.float32), 4, 10, NO_IDS, NO_IDS, np.zeros(10, TOKEN_DATA)[::2]), ValueError),
    ((np.zeros(100, np.float32), 4, 10, NO_IDS, NO_IDS, bytes(120)), BufferError),  # not writable
    ((np.zeros(100, np.float32), 4, 10, NO_IDS, NO_IDS), TypeError),
    ((np.zeros(100, np.float32), "4", 10, NO_IDS, NO_IDS, np.zeros(10, TOKEN_DATA)), TypeError),
])
def test_fill_refuses_buffers_of_the_wrong_kind(args, error):
    with pytest.raises(error):
        _topset.fill(*args)


def test_fill_with_k_beyond_the_row_or_below_one_gives_none():
    logits = np.arange(64, dtype=np.float32)
    out = np.zeros(64, TOKEN_DATA)
    assert _topset.fill(logits, 0, 64, NO_IDS, NO_IDS, out) == -1
    assert _topset.fill(logits, -5, 64, NO_IDS, NO_IDS, out) == -1
    assert _topset.fill(logits, 65, 1000, NO_IDS, NO_IDS, out) == -1
    assert _topset.fill(np.zeros(0, np.float32), 1, 10, NO_IDS, NO_IDS, out) == -1


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
    assert candidate_ids(narrowing, np.zeros(N_VOCAB, dtype=np.float32)) is None


@pytest.mark.parametrize("params, narrowed", [
    (dict(temperature=0.8), True),
    (dict(temperature=0.8, repeat_penalty=1.2, logit_bias={3: 1.0}), True),
    (dict(temperature=0.0, repeat_penalty=1.2), True),
    (dict(temperature=0.8, top_k=0), False),  # no cut: top-p reads every token
    (dict(temperature=0.8, top_n_sigma=1.5), False),  # reads the whole row before top-k
    (dict(temperature=0.8, mirostat=2), False),
    (dict(temperature=0.8, samplers=("temperature", "top_k")), False),
    (dict(temperature=0.0), False),  # plain greedy: the argmax in C, no chain
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



@pytest.mark.parametrize("params", CHAINS)
def test_the_engine_s_narrowed_pick_on_llama_cpp_s_row_draws_what_the_whole_chain_draws(params, monkeypatch):
    """SamplerChain.sample, as the engine calls it: one C call reads the row through
    llama_get_logits_ith (a stand-in here), narrows it, applies the chain and accepts
    the pick; the penalties' window the Python side keeps must stay in step with the
    chain's own history, draw after draw."""
    narrowed, whole, rng, history = _twin_chains(params, seed=99, rng_seed=11)
    window = narrowed.narrowing._window
    try:
        for step in range(150):
            logits = _logits(rng, history[-24:])
            if "logit_bias" in params:
                logits[7] = logits.min() - 1.0
            rows = Rows(np.zeros(N_VOCAB, dtype=np.float32), logits.copy())
            monkeypatch.setattr(llama_runtime, "LOGITS_ITH", rows.address)
            token = narrowed.sample(CTX, 1)
            assert rows.seen == [(CTX, 1)]
            assert token == whole.sample_with_probs(logits.copy(), 0)[0], step
            history.append(token)
            if window:
                assert narrowed.narrowing._counts == Counter(history[-window:])
    finally:
        narrowed.free()
        whole.free()


def test_a_row_the_set_cannot_be_had_of_is_left_to_the_whole_chain(monkeypatch):
    """The C pick answers None, with nothing applied or accepted, where fill() would
    refuse the row (a NaN): the chain then runs on the whole row."""
    chain = SamplerChain(SamplingParams(seed=1, temperature=0.8, top_k=40, repeat_penalty=1.1), None, N_VOCAB, 64)
    try:
        logits = _logits(np.random.default_rng(3), [])
        logits[5] = np.nan
        rows = Rows(logits)
        monkeypatch.setattr(llama_runtime, "LOGITS_ITH", rows.address)
        assert chain._candidates.pick_narrowed(chain._address, CTX, 0, chain.narrowing) is None
        assert rows.seen == [(CTX, 0)] and chain.narrowing._counts == {}  # nothing accepted
        logits[5] = 0.0
        assert chain._candidates.pick_narrowed(chain._address, CTX, 0, chain.narrowing) is not None
    finally:
        chain.free()
