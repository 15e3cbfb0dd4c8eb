"""Control vectors (llama-server's --control-vector, --control-vector-scaled and
--control-vector-layer-range): per-layer directions added to the residual stream.

A file holds F32 tensors `direction.N` of n_embd values each (N from 1: layer N);
several files, each with its scale, add up, as llama.cpp's own loader adds them."""

from __future__ import annotations

import ctypes
import re
from dataclasses import dataclass

import gguf
import llama_cpp
import numpy as np


class ControlVectorError(ValueError):
    pass


@dataclass(frozen=True)
class ControlVectors:
    files: tuple[tuple[str, float], ...] = ()  # (GGUF, scale) each
    layer_start: int = 0  # the first layer they apply to (0: the first, 1)
    layer_end: int = 0  # the last, inclusive (0: the model's last)


def combined_directions(files: tuple[tuple[str, float], ...]) -> tuple[np.ndarray, int]:
    """(data, n_embd): layer N's direction at [(N - 1) * n_embd, N * n_embd), scaled and summed."""
    data, n_embd = np.zeros(0, dtype=np.float32), -1
    for path, scale in files:
        try:
            reader = gguf.GGUFReader(path)
        except Exception as exc:  # noqa: BLE001 - the gguf reader raises several kinds on a bad file
            raise ControlVectorError(f"{path}: not a GGUF file ({type(exc).__name__})") from None
        if not reader.tensors:
            raise ControlVectorError(f"{path}: no direction tensors")
        for tensor in reader.tensors:
            match = re.fullmatch(r"direction\.(\d+)", tensor.name)
            if match is None or int(match.group(1)) == 0:
                raise ControlVectorError(f"{path}: {tensor.name!r} is not a direction tensor (direction.N, N from 1)")
            if tensor.tensor_type != gguf.GGMLQuantizationType.F32 or len(tensor.shape) != 1:
                raise ControlVectorError(f"{path}: {tensor.name} must be a one-dimensional F32 tensor")
            size = int(tensor.shape[0])
            if n_embd not in (-1, size):
                raise ControlVectorError(f"{path}: {tensor.name} has {size} values where the others have {n_embd}")
            n_embd = size
            layer = int(match.group(1))
            if data.size < layer * n_embd:
                data = np.concatenate([data, np.zeros(layer * n_embd - data.size, dtype=np.float32)])
            data[(layer - 1) * n_embd : layer * n_embd] += np.asarray(tensor.data, dtype=np.float32) * scale
    return data, n_embd


def apply_control_vectors(ctx, model, vectors: ControlVectors) -> None:
    """Load the files and set their sum on the context (a ControlVectorError else)."""
    data, n_embd = combined_directions(vectors.files)
    model_embd = llama_cpp.llama_model_n_embd(model)
    if n_embd != model_embd:
        raise ControlVectorError(f"the control vectors have {n_embd} values a layer, the model {model_embd}")
    start = vectors.layer_start if vectors.layer_start > 0 else 1
    end = vectors.layer_end if vectors.layer_end > 0 else llama_cpp.llama_model_n_layer(model)
    pointer = data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    if llama_cpp.llama_set_adapter_cvec(ctx, pointer, data.size, n_embd, start, end) != 0:
        raise ControlVectorError("llama.cpp refused the control vectors")
