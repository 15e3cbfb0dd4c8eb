"""Log-probabilities of one sampled position, for the `logprobs` response fields."""

from __future__ import annotations

import numpy as np

from mlxcel.engine.top_logits import at_least_top

MAX_TOP_LOGPROBS = 20


def log_normalizer(logits: np.ndarray) -> float:
    """log(sum(exp(logits))), shifted by the max and summed in float64."""
    top = np.float32(logits.max())
    shifted = np.subtract(logits, top, dtype=np.float32)
    np.exp(shifted, out=shifted)
    return float(top) + float(np.log(shifted.sum(dtype=np.float64)))


def token_logprobs(logits: np.ndarray, token: int, k: int) -> tuple[float, list[tuple[int, float]]]:
    """The log-softmax value of `token`, and the `k` most likely tokens as
    (id, logprob), most likely first (ties by lower id). `k` is clamped to
    [0, vocabulary size]; a token whose logit is -inf gets -inf."""
    if k < 0:
        raise ValueError("k must be >= 0")
    lse = log_normalizer(logits)
    chosen = float(logits[token]) - lse
    n = logits.shape[0]
    k = min(k, n)
    if k == 0:
        return chosen, []
    ids = top_k_ids(logits, k)
    values = logits[ids]
    top = sorted(zip(ids.tolist(), values.tolist()), key=lambda item: (-item[1], item[0]))
    return chosen, [(token_id, value - lse) for token_id, value in top]


def top_k_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """Ids of the `k` largest logits, unordered (1 <= k <= len(logits)): argpartition
    over the few hundred ids that can hold them (`at_least_top`), not the whole row."""
    candidates = at_least_top(logits, k)
    if candidates.shape[0] > k:
        picked = np.argpartition(logits[candidates], candidates.shape[0] - k)
        candidates = candidates[picked[candidates.shape[0] - k :]]
    return candidates


def bytes_of(piece: bytes) -> list[int]:
    """A token's text as the byte list OpenAI's `bytes` field carries."""
    return list(piece)
