"""p-less sampling: a truncation with no hyperparameter.

A token survives when its probability under softmax(logits / temperature) is at
least sum(p^2), the probability that two independent draws agree. With
e = exp((logit - max) / T) and s = sum(e) that reads e_i >= sum(e^2) / s, so no
division over the vocabulary is needed. The argmax always survives (its e is 1,
and sum(e^2)/s <= 1 always; it is also forced in case of rounding). A temperature
<= 0 is the greedy limit: only the argmax survives.

This runs once per sampled token over the whole vocabulary, so it works in float32
in one scratch buffer: argmax, one fused shift-and-scale, exp, a sum and a dot.
"""

from __future__ import annotations

import numpy as np


def _drop_mask(logits: np.ndarray, temperature: float, scratch: np.ndarray | None) -> np.ndarray:
    """True where p < sum(p^2)."""
    best = int(np.argmax(logits))
    if temperature <= 0.0:
        drop = np.ones(logits.shape[0], dtype=bool)
        drop[best] = False
        return drop
    e = scratch if scratch is not None else np.empty(logits.shape[0], dtype=np.float32)
    top = np.float32(logits[best])
    scale = np.float32(1.0 / temperature)
    np.subtract(logits, top, out=e)
    np.multiply(e, scale, out=e)
    np.exp(e, out=e)
    total = float(e.sum(dtype=np.float64))
    squares = float(np.dot(e, e))
    drop = e < np.float32(squares / total)
    drop[best] = False
    return drop


def apply_p_less(logits_view: np.ndarray, temperature: float, scratch: np.ndarray | None = None) -> int:
    """Sets the dropped logits to -inf in place (e.g. a view of llama.cpp's logits
    row). Returns how many tokens survive."""
    if logits_view.dtype != np.float32:
        raise TypeError("apply_p_less needs a float32 logits view")
    drop = _drop_mask(logits_view, temperature, scratch)
    np.copyto(logits_view, np.float32(-np.inf), where=drop)
    return int(logits_view.shape[0] - np.count_nonzero(drop))
