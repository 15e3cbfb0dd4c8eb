"""llama.cpp's own XTC and top-n-sigma samplers, and our numpy p-less, narrowing a
fixed candidate set (through mlxcel.engine.token_data)."""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from mlxcel.engine.p_less import apply_p_less
from tests.unit.token_data import TokenDataArray

PROBS = np.array([0.40, 0.25, 0.15, 0.12, 0.05, 0.03], dtype=np.float32)


@pytest.fixture
def sampler():
    made = []

    def make(pointer):
        made.append(pointer)
        return pointer

    yield make
    for pointer in made:
        llama_cpp.llama_sampler_free(pointer)


def test_xtc_removes_the_top_choices_above_threshold(sampler):
    """p=1.0 always fires; t=0.1: tokens 0-3 are >= 0.1, all but the least likely
    of them are excluded, and the rest survive."""
    cands = TokenDataArray.from_logits(np.log(PROBS))
    cands.apply(sampler(llama_cpp.llama_sampler_init_xtc(1.0, 0.1, 1, 1234)))
    assert cands.surviving_ids() == [3, 4, 5]


def test_xtc_respects_min_keep_and_probability(sampler):
    cands = TokenDataArray.from_logits(np.log(PROBS))
    cands.apply(sampler(llama_cpp.llama_sampler_init_xtc(1.0, 0.1, 4, 1234)))
    assert cands.surviving_ids() == [0, 1, 2, 3, 4, 5]  # would leave 3 < min_keep
    cands.load(np.log(PROBS))
    cands.apply(sampler(llama_cpp.llama_sampler_init_xtc(0.0, 0.1, 1, 1234)))
    assert cands.surviving_ids() == [0, 1, 2, 3, 4, 5]  # never fires


def test_top_n_sigma_keeps_logits_within_n_std_of_the_max(sampler):
    logits = np.array([10.0, 9.5, 8.0, 5.0, 1.0, 0.0, 0.0, -1.0], dtype=np.float32)
    std = float(logits.std())  # population std, as llama.cpp computes it
    for n, expected in [(1.0, [0, 1, 2]), (2.0, [0, 1, 2, 3])]:
        assert np.flatnonzero(logits >= logits.max() - n * std).tolist() == expected
        cands = TokenDataArray.from_logits(logits)
        cands.apply(sampler(llama_cpp.llama_sampler_init_top_n_sigma(n)))
        assert cands.surviving_ids() == expected


def test_chain_picks_from_the_survivors(sampler):
    cands = TokenDataArray.from_logits(np.log(PROBS))
    cands.apply(sampler(llama_cpp.llama_sampler_init_xtc(1.0, 0.1, 1, 7)))
    cands.apply(sampler(llama_cpp.llama_sampler_init_greedy()))
    assert cands.selected_token() == 3


def test_p_less_narrows_the_same_way(sampler):
    logits = np.log(np.array([0.3, 0.3, 0.2, 0.1, 0.1], dtype=np.float32))  # sum p^2 = 0.24
    apply_p_less(logits, 1.0)
    cands = TokenDataArray.from_logits(logits)
    assert cands.surviving_ids() == [0, 1]
    cands.apply(sampler(llama_cpp.llama_sampler_init_dist(99)))
    assert cands.selected_token() in (0, 1)


def test_reload_resets_pointer_and_size(sampler):
    cands = TokenDataArray(len(PROBS))
    cands.load(np.log(PROBS))
    cands.apply(sampler(llama_cpp.llama_sampler_init_xtc(1.0, 0.1, 1, 1)))
    assert len(cands.current()) == 3
    cands.load(np.zeros(len(PROBS), dtype=np.float32))
    assert len(cands.current()) == len(PROBS) and cands.selected_token() is None
