"""Sampler order and the sampling settings llama-server has beyond the basics:
names and codes, the chain they build (run on fixed logits), and the flags."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.cli.usage import UsageError
from mlxcel.engine.sampler_order import DEFAULT_ORDER, parse_sampler_order
from mlxcel.engine.sampling import SamplerChain, SamplingParams
from tests.unit.token_data import TokenDataArray

LOGITS = np.log(np.array([0.40, 0.25, 0.15, 0.12, 0.05, 0.03], dtype=np.float32))


@pytest.mark.parametrize("given", [
    ["top_k", "temperature"], ["top-k", "temp"], ["TopK", "Temperature"], "kt",
])
def test_names_aliases_and_codes(given):
    assert parse_sampler_order(given) == ("top_k", "temperature")


def test_default_order_is_llama_servers_code_string():
    assert parse_sampler_order("edskypmxt") == DEFAULT_ORDER
    assert parse_sampler_order(["nucleus", "typ", "adaptive-p", "infill"]) == ("top_p", "typ_p", "adaptive_p", "infill")


@pytest.mark.parametrize("bad", [["top_k", "bogus"], "kz", ["x" * 10] * 65])
def test_unknown_or_too_many_samplers_are_refused(bad):
    with pytest.raises(ValueError):
        parse_sampler_order(bad)


def draws(params: SamplingParams, rounds: int = 200) -> set[int]:
    """The tokens a chain picks from LOGITS over `rounds` fresh candidate sets."""
    chain = SamplerChain(params, vocab=None, n_vocab=len(LOGITS), context_size=64)
    picked = set()
    try:
        for _ in range(rounds):
            cands = TokenDataArray.from_logits(LOGITS)
            cands.apply(chain._ptr)
            picked.add(cands.selected_token())
    finally:
        chain.free()
    return picked


def test_order_decides_which_samplers_run():
    hot = dict(temperature=3.0, top_p=1.0, min_p=0.0, seed=11)
    assert draws(SamplingParams(top_k=1, samplers=("top_k", "temperature"), **hot)) == {0}
    assert len(draws(SamplingParams(top_k=1, samplers=("temperature",), **hot))) > 2  # top-k left out


def test_greedy_still_runs_what_moves_the_argmax():
    assert draws(SamplingParams(temperature=0.0), rounds=5) == {0}
    # XTC at probability 1 removes every candidate above the threshold but the last of them
    assert draws(SamplingParams(temperature=0.0, xtc_probability=1.0, xtc_threshold=0.1), rounds=5) == {3}


def test_mirostat_replaces_the_order_and_is_seeded():
    params = dict(temperature=1.0, mirostat=2, mirostat_tau=5.0, mirostat_eta=0.1, top_k=1)
    first = [draws(SamplingParams(seed=seed, **params), rounds=1) for seed in range(12)]
    assert len(set().union(*first)) > 1  # top_k=1 would have forced token 0: mirostat ignores it
    assert first == [draws(SamplingParams(seed=seed, **params), rounds=1) for seed in range(12)]


def test_dynamic_temperature_and_adaptive_p_build():
    assert draws(SamplingParams(temperature=0.8, dynatemp_range=0.5, seed=3)) <= set(range(6))
    assert draws(SamplingParams(temperature=1.0, adaptive_target=0.3, seed=3,
                                samplers=("temperature", "adaptive_p"))) <= set(range(6))


def test_sampling_flags_become_the_defaults():
    config = parse_serve_args([
        "-m", "smollm2-135m-instruct", "--mirostat", "2", "--mirostat-lr", "0.2", "--mirostat-ent", "4",
        "--dynatemp-range", "0.5", "--dynatemp-exp", "2", "--samplers", "top_k;temperature", "--typical", "0.9",
        "--xtc-probability", "0.5", "--dry-multiplier", "0.8", "--dry-sequence-breaker", "none",
        "-l", "15+1.5", "--logit-bias", "2-inf", "--ignore-eos", "--top-n-sigma", "2",
    ])
    s = config.sampling
    assert (s.mirostat, s.mirostat_eta, s.mirostat_tau) == (2, 0.2, 4.0)
    assert (s.dynatemp_range, s.dynatemp_exponent, s.typical_p, s.top_n_sigma) == (0.5, 2.0, 0.9, 2.0)
    assert s.samplers == ("top_k", "temperature") and s.dry_sequence_breakers == ()
    assert (s.xtc_probability, s.dry_multiplier) == (0.5, 0.8)
    assert s.logit_bias == {15: 1.5, 2: -math.inf} and config.ignore_eos
    assert parse_serve_args(["-m", "smollm2-135m-instruct", "--sampler-seq", "kt"]).sampling.samplers == (
        "top_k", "temperature")


@pytest.mark.parametrize("argv", [["--samplers", ""], ["--sampler-seq", ""]])
def test_an_empty_order_leaves_only_the_draw_as_llama_server_does(argv):
    assert parse_serve_args(["-m", "smollm2-135m-instruct", *argv]).sampling.samplers == ()
    # no top-k, no temperature: every token of the distribution can be drawn
    assert len(draws(SamplingParams(top_k=1, temperature=0.1, seed=5, samplers=()), rounds=200)) > 2


@pytest.mark.parametrize("argv", [["--samplers", "top_k;nope"], ["--sampler-seq", "kq"], ["--mirostat", "3"],
                                  ["-l", "abc"], ["--dynatemp-range", "nan"]])
def test_bad_sampling_flags_fail_in_one_line(argv):
    with pytest.raises(UsageError):
        parse_serve_args(["-m", "smollm2-135m-instruct", *argv])
