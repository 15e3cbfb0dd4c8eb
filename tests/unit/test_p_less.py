"""p-less truncation: keep tokens with p >= sum(p^2) under the temperature-scaled softmax."""

from __future__ import annotations

import numpy as np
import pytest

from mlxcel.engine.p_less import apply_p_less


def p_less_keep_mask(logits, temperature: float, scratch: np.ndarray | None = None) -> np.ndarray:
    """The tokens p-less keeps, read off apply_p_less on a copy."""
    row = np.array(logits, dtype=np.float32)
    apply_p_less(row, temperature, scratch)
    return np.isfinite(row)


def _reference(logits, temperature):
    z = np.asarray(logits, dtype=np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    return p, (p * p).sum()


def test_fixed_distributions():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    assert p_less_keep_mask(logits, 1.0).tolist() == [True, False, False, False, False]  # sum p^2 = 0.325
    logits = np.log(np.array([0.3, 0.3, 0.2, 0.1, 0.1], dtype=np.float32))
    assert np.flatnonzero(p_less_keep_mask(logits, 1.0)).tolist() == [0, 1]  # sum p^2 = 0.24


def test_uniform_keeps_everything():
    assert p_less_keep_mask(np.zeros(1000, dtype=np.float32), 0.7).all()


def test_higher_temperature_keeps_more():
    logits = np.array([5.0, 4.0, 3.5, 3.0, 1.0, 0.0, -2.0], dtype=np.float32)
    kept = [int(p_less_keep_mask(logits, t).sum()) for t in (0.25, 1.0, 4.0, 100.0)]
    assert kept == sorted(kept) and kept[0] < kept[-1]


def test_matches_float64_reference_on_random_logits():
    rng = np.random.default_rng(1)
    for _ in range(50):
        logits = (rng.standard_normal(5000) * rng.uniform(0.5, 6)).astype(np.float32)
        temperature = float(rng.uniform(0.3, 2.0))
        p, threshold = _reference(logits, temperature)
        clear = np.abs(p - threshold) > 1e-6 * threshold
        mask = p_less_keep_mask(logits, temperature)
        assert np.array_equal(mask[clear], (p >= threshold)[clear])


def test_argmax_always_kept_and_greedy_limit():
    logits = np.array([0.0, 9.0, 8.9, -np.inf], dtype=np.float32)
    assert p_less_keep_mask(logits, 1.0)[1]
    assert p_less_keep_mask(logits, 0.0).tolist() == [False, True, False, False]
    assert not p_less_keep_mask(logits, 1.0)[3]  # a masked token stays out


def test_apply_in_place_on_a_view():
    row = np.log(np.array([[0.3, 0.3, 0.2, 0.1, 0.1]], dtype=np.float32))
    view = row[0]
    assert apply_p_less(view, 1.0) == 2
    assert np.isfinite(row[0, :2]).all() and np.isneginf(row[0, 2:]).all()
    with pytest.raises(TypeError):
        apply_p_less(np.zeros(4, dtype=np.float64), 1.0)


def test_scratch_buffer_gives_the_same_answer():
    logits = np.random.default_rng(2).standard_normal(2048).astype(np.float32)
    scratch = np.empty_like(logits)
    assert np.array_equal(p_less_keep_mask(logits, 0.8), p_less_keep_mask(logits, 0.8, scratch))
