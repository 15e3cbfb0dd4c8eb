"""What a route does to an embedding after the model: llama-server's normalisations
and the OpenAI base64 encoding."""

from __future__ import annotations

import base64

import numpy as np


def normalize(vector: np.ndarray, mode: int) -> np.ndarray:
    """llama-server's `embd_normalize`: -1 none, 0 max absolute scaled to int16's
    range, 1 taxicab, 2 euclidean, above 2 the p-norm. A zero vector stays zero."""
    values = vector.astype(np.float64)
    if mode < -1:
        raise ValueError(f"embd_normalize {mode} is not one of -1, 0, 1, 2 or a p-norm above 2")
    if mode == -1:
        return vector.astype(np.float32)
    if mode == 0:
        scale = float(np.max(np.abs(values), initial=0.0)) / 32760.0
    elif mode == 2:
        scale = float(np.sqrt(np.sum(values * values)))
    else:  # the p-norm taken relative to the largest value, so a large p cannot overflow
        largest = float(np.max(np.abs(values), initial=0.0))
        scale = largest * float(np.sum((np.abs(values) / largest) ** mode) ** (1.0 / mode)) if largest > 0 else 0.0
    factor = 1.0 / scale if scale > 0 else 0.0
    return (values * factor).astype(np.float32)


def to_base64(vector: np.ndarray) -> str:
    """Little-endian float32 bytes, base64: what the OpenAI SDK decodes."""
    return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")


_FLOAT32 = "{:.9g}".format  # nine significant digits give back the same float32


def floats_json(vector: np.ndarray) -> str:
    """A JSON array of the vector's float32 values, each exact to float32 and about
    twice as fast to render as json.dumps of the float64 values. Non-finite values
    (a broken model) raise ValueError: JSON has no NaN."""
    if not np.isfinite(vector).all():
        raise ValueError("the model produced a non-finite embedding value")
    return "[" + ",".join(map(_FLOAT32, vector.astype(np.float32).tolist())) + "]"
