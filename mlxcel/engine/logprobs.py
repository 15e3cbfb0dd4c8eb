"""Log-probabilities of one sampled position, for the `logprobs` response fields."""

from __future__ import annotations

import numpy as np

MAX_TOP_LOGPROBS = 20
_BLOCK = 256


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
    """Ids of the `k` largest logits, unordered (1 <= k <= len(logits)).

    Block maxima bound the search: the k-th largest of them is a value at least k
    logits reach, so every top-k logit is >= it. On a 152k vocabulary that leaves a
    few hundred candidates for argpartition instead of the whole row.
    """
    n = logits.shape[0]
    full = n - n % _BLOCK
    if full // _BLOCK < 4 * k:
        return np.argpartition(logits, n - k)[n - k :]
    maxima = logits[:full].reshape(-1, _BLOCK).max(axis=1)
    if full < n:
        maxima = np.append(maxima, logits[full:].max())
    threshold = np.partition(maxima, maxima.shape[0] - k)[maxima.shape[0] - k]
    candidates = np.flatnonzero(logits >= threshold)
    if candidates.shape[0] > k:
        picked = np.argpartition(logits[candidates], candidates.shape[0] - k)
        candidates = candidates[picked[candidates.shape[0] - k :]]
    return candidates


def bytes_of(piece: bytes) -> list[int]:
    """A token's text as the byte list OpenAI's `bytes` field carries."""
    return list(piece)
