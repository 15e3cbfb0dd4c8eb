"""Plain greedy takes the argmax in numpy instead of running the sampler chain: it
must pick what the chain picks (bans, ties), and only plain greedy may skip it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlxcel.engine.sampling import SamplerChain, SamplingParams
from tests.unit.token_data import TokenDataArray

N_VOCAB = 1000


def chain_pick(chain: SamplerChain, logits: np.ndarray) -> int:
    cands = TokenDataArray.from_logits(logits)
    cands.apply(chain._ptr)
    return cands.selected_token()


@pytest.mark.parametrize("banned", [frozenset(), frozenset({0, 2, 4}), frozenset(range(N_VOCAB))])
def test_argmax_picks_what_the_greedy_chain_picks(banned):
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
            assert chain.argmax(logits.copy()) == expected
    finally:
        chain.free()


def test_a_ban_given_as_logit_bias_is_plain_greedy():
    chain = SamplerChain(SamplingParams(temperature=0.0, logit_bias={5: -math.inf}), None, N_VOCAB, 64)
    logits = np.zeros(N_VOCAB, dtype=np.float32)
    logits[5], logits[9] = 3.0, 2.0
    assert chain.argmax(logits) == 9
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
