"""Log-softmax of one position: the chosen token and the top-k."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mlxcel.engine.logprobs import bytes_of, log_normalizer, token_logprobs, top_k_ids


def _reference(logits):
    z = np.asarray(logits, dtype=np.float64)
    return z - (z.max() + np.log(np.exp(z - z.max()).sum()))


def test_small_vocabulary():
    logits = np.array([1.0, 3.0, 2.0, 3.0, -np.inf], dtype=np.float32)
    ref = _reference(logits)
    chosen, top = token_logprobs(logits, 2, 3)
    assert chosen == pytest.approx(ref[2])
    assert [t for t, _ in top] == [1, 3, 2]  # ties by lower id
    assert [lp for _, lp in top] == pytest.approx([ref[1], ref[3], ref[2]])
    assert token_logprobs(logits, 4, 0) == (-math.inf, [])
    assert len(token_logprobs(logits, 0, 50)[1]) == 5


def test_stable_for_huge_logits():
    logits = np.array([1e4, 1e4 - 1.0, -1e4], dtype=np.float32)
    chosen, top = token_logprobs(logits, 0, 2)
    assert chosen == pytest.approx(-math.log1p(math.exp(-1.0)))
    assert all(math.isfinite(lp) for _, lp in top)


def test_matches_reference_on_large_vocabulary():
    rng = np.random.default_rng(0)
    for n in (49_152, 151_936, 1000, 257):
        logits = (rng.standard_normal(n) * 4).astype(np.float32)
        ref = _reference(logits)
        chosen, top = token_logprobs(logits, 17, 20)
        assert chosen == pytest.approx(ref[17], abs=1e-5)
        expected = np.argsort(-ref, kind="stable")[:20]
        assert [t for t, _ in top] == expected.tolist()
        assert [lp for _, lp in top] == pytest.approx(ref[expected].tolist(), abs=1e-5)


def test_top_k_with_many_ties_and_masked_rows():
    logits = np.full(10_000, -np.inf, dtype=np.float32)
    logits[[3, 5000, 9999]] = [1.0, 2.0, 1.0]
    assert sorted(top_k_ids(logits, 3).tolist()) == [3, 5000, 9999]
    flat = np.zeros(70_000, dtype=np.float32)
    assert len(set(top_k_ids(flat, 20).tolist())) == 20


def test_probabilities_sum_to_one():
    logits = np.random.default_rng(5).standard_normal(3000).astype(np.float32)
    assert np.exp(logits.astype(np.float64) - log_normalizer(logits)).sum() == pytest.approx(1.0)


def test_negative_k_rejected():
    with pytest.raises(ValueError):
        token_logprobs(np.zeros(3, dtype=np.float32), 0, -1)


def test_bytes_of():
    assert bytes_of("é".encode()) == [0xC3, 0xA9]
    assert bytes_of(b"") == []
