"""Plain greedy takes the argmax in one C call on llama.cpp's logits row instead of
running the sampler chain: it must pick what the chain picks (bans, ties, NaN as numpy),
and only plain greedy may skip it. The row comes through a stand-in for
llama_get_logits_ith (a ctypes callback), so the engine's own call path is exercised."""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from mlxcel.engine import _topset, llama_runtime
from mlxcel.engine.sampling import SamplerChain, SamplingParams
from tests.unit.token_data import TokenDataArray

N_VOCAB = 1000
CTX = 0x1000  # any non-null "context": the stand-in ignores it
LOGITS_ITH = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)


class Rows:
    """A stand-in for llama_get_logits_ith over numpy rows: row i's address, or NULL
    for an index without one (as llama.cpp answers then)."""

    def __init__(self, *rows: np.ndarray) -> None:
        self.rows = [np.ascontiguousarray(r, dtype=np.float32) for r in rows]
        self.seen: list[tuple[int, int]] = []

        def lookup(ctx, i):
            self.seen.append((ctx, i))
            return self.rows[i].ctypes.data if 0 <= i < len(self.rows) else None

        self.fn = LOGITS_ITH(lookup)  # kept alive with the object
        self.address = ctypes.cast(self.fn, ctypes.c_void_p).value


def pick(rows: Rows, index: int = 0, bans=()) -> int:
    return _topset.argmax_row(rows.address, CTX, index, rows.rows[index].shape[0] if index < len(rows.rows) else 1,
                              np.asarray(bans, dtype=np.int32))


@pytest.fixture
def served(monkeypatch):
    """The engine's sampling path reading rows from the stand-in."""
    def serve(*rows: np.ndarray) -> Rows:
        fake = Rows(*rows)
        monkeypatch.setattr(llama_runtime, "LOGITS_ITH", fake.address)
        return fake
    return serve


def chain_pick(chain: SamplerChain, logits: np.ndarray) -> int:
    cands = TokenDataArray.from_logits(logits)
    cands.apply(chain._ptr)
    return cands.selected_token()


@pytest.mark.parametrize("banned", [frozenset(), frozenset({0, 2, 4}), frozenset(range(N_VOCAB))])
def test_argmax_picks_what_the_greedy_chain_picks(banned, served):
    chain = SamplerChain(SamplingParams(temperature=0.0), None, N_VOCAB, 64, banned_tokens=banned)
    rng = np.random.default_rng(7)
    try:
        assert chain.argmax_bans is not None
        for trial in range(50):
            # coarse values: many ties, which both break by the lowest id
            logits = rng.integers(-4, 4, N_VOCAB).astype(np.float32)
            if trial % 5 == 0:
                logits[sorted(banned)[:1]] = 100.0  # a banned token would win
            expected = chain_pick(chain, logits)
            fake = served(logits.copy(), logits.copy())
            assert chain.sample(CTX, trial % 2) == expected
            assert fake.seen == [(CTX, trial % 2)]
            assert (fake.rows[trial % 2][sorted(banned)] == -np.inf).all()  # banned in place
    finally:
        chain.free()


def test_a_ban_given_as_logit_bias_is_plain_greedy(served):
    chain = SamplerChain(SamplingParams(temperature=0.0, logit_bias={5: -math.inf}), None, N_VOCAB, 64)
    logits = np.zeros(N_VOCAB, dtype=np.float32)
    logits[5], logits[9] = 3.0, 2.0
    served(logits)
    assert chain.sample(CTX, 0) == 9
    chain.free()


@pytest.mark.parametrize("params", [
    dict(temperature=0.7),
    dict(temperature=0.0, logit_bias={5: 2.0}),
    dict(temperature=0.0, repeat_penalty=1.1),
    dict(temperature=0.0, frequency_penalty=0.5),
    dict(temperature=0.0, xtc_probability=0.5),
    dict(temperature=0.0, mirostat=2),
])
def test_anything_but_plain_greedy_runs_the_chain(params):
    chain = SamplerChain(SamplingParams(**params), None, N_VOCAB, 64)
    assert chain.argmax_bans is None
    chain.free()


def test_penalties_and_top_k_that_do_nothing_keep_it_plain():
    chain = SamplerChain(SamplingParams(temperature=0.0, repeat_penalty=1.0, top_k=1, top_p=0.5), None, N_VOCAB, 64)
    assert chain.argmax_bans is not None
    chain.free()


@pytest.mark.parametrize("n", [1, 7, 49152, 151936])
def test_the_c_argmax_is_numpys_on_random_rows(n):
    rng = np.random.default_rng(n)
    for trial in range(20):
        row = rng.standard_normal(n).astype(np.float32) * 10
        if trial % 4 == 1:
            row = np.round(row).astype(np.float32)  # ties: the lowest id wins
        if trial % 4 == 2:
            row[rng.integers(0, n, 3)] = np.inf
        if trial % 4 == 3:
            row[:] = -np.inf
        assert pick(Rows(row)) == int(row.argmax())


def test_nan_is_picked_first_as_numpy_picks_it():
    row = np.zeros(100, dtype=np.float32)
    row[10], row[40], row[70] = np.inf, np.nan, -np.nan
    assert pick(Rows(row)) == 40 == int(row.argmax())
    row[40] = 0.0
    assert pick(Rows(row)) == 70 == int(row.argmax())  # a NaN with its sign bit set too


def test_negative_zero_ties_with_positive_zero():
    row = np.full(8, -1.0, dtype=np.float32)
    row[3], row[5] = -0.0, 0.0
    assert pick(Rows(row)) == 3 == int(row.argmax())


def test_bans_are_set_in_place_and_ids_outside_the_row_are_skipped():
    row = np.arange(10, dtype=np.float32)
    rows = Rows(row)
    assert pick(rows, bans=[9, 8, -1, 10, 1 << 30]) == 7
    assert rows.rows[0][8] == rows.rows[0][9] == -np.inf
    assert rows.rows[0][7] == 7.0


def test_every_id_banned_leaves_the_lowest():
    assert pick(Rows(np.arange(5, dtype=np.float32)), bans=range(5)) == 0


def test_an_index_without_a_row_is_an_error_not_a_crash():
    rows = Rows(np.zeros(4, dtype=np.float32))
    with pytest.raises(ValueError, match="no logits for batch output 3"):
        _topset.argmax_row(rows.address, CTX, 3, 4, np.zeros(0, dtype=np.int32))


@pytest.mark.parametrize("args, error", [
    ((0, CTX, 0, 4, np.zeros(0, np.int32)), ValueError),  # no function
    ((1, 0, 0, 4, np.zeros(0, np.int32)), ValueError),  # no context
    ((1, CTX, 0, 0, np.zeros(0, np.int32)), ValueError),  # an empty vocabulary
    ((1, CTX, 1 << 40, 4, np.zeros(0, np.int32)), ValueError),  # not an int32 index
    ((1, CTX, 0, 4, np.zeros(2, np.int64)), ValueError),  # bans of the wrong item size
    ((1, CTX, 0, 4, "ab"), TypeError),  # not a buffer
    ((1, CTX, 0, 4), TypeError),  # a missing argument
    (("x", CTX, 0, 4, np.zeros(0, np.int32)), TypeError),
])
def test_bad_arguments_are_refused_before_any_call(args, error):
    # the function address 1 would crash if it were called: every case stops before
    with pytest.raises(error):
        _topset.argmax_row(*args)
