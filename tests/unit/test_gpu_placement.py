"""-ngl, -sm, -mg and -ts reach llama.cpp's model parameters (they take effect on a GPU
build of llama.cpp), and bad values stop the start."""

from __future__ import annotations

import ctypes

import llama_cpp
import pytest

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.cli.usage import UsageError
from mlxcel.engine.llama_runtime import RuntimeConfig, model_params


def _config(*flags: str):
    return parse_serve_args(["-m", "smollm2-135m-instruct", *flags])


def test_the_flags_reach_the_model_parameters():
    config = _config("-ngl", "99", "-sm", "row", "-mg", "1", "-ts", "3,1")
    assert (config.n_gpu_layers, config.split_mode, config.main_gpu, config.tensor_split) == (99, "row", 1, (3.0, 1.0))
    params = model_params(RuntimeConfig(model_path="x.gguf", n_ctx=512, n_gpu_layers=99, split_mode="row",
                                        main_gpu=1, tensor_split=(3.0, 1.0)))
    assert params.n_gpu_layers == 99 and params.main_gpu == 1
    assert params.split_mode == llama_cpp.LLAMA_SPLIT_MODE_ROW
    shares = ctypes.cast(params.tensor_split, ctypes.POINTER(ctypes.c_float))
    assert [shares[i] for i in range(3)] == [3.0, 1.0, 0.0]


def test_defaults_leave_llama_cpp_s_own():
    params = model_params(RuntimeConfig(model_path="x.gguf", n_ctx=512))
    assert params.split_mode == llama_cpp.LLAMA_SPLIT_MODE_LAYER and params.main_gpu == 0
    assert not params.tensor_split  # a null pointer: llama.cpp splits by free memory


def test_slashes_separate_shares_as_in_llama_server():
    assert _config("--tensor-split", "1/1/2").tensor_split == (1.0, 1.0, 2.0)


@pytest.mark.parametrize("flags", [
    ("-sm", "diagonal"), ("-mg", "-1"), ("-ts", "a,b"), ("-ts", "0,0"), ("-ts", "nan,1"), ("-ts", "-1,2"),
    ("-ts", ",".join(["1"] * 64)),
])
def test_bad_values_stop_the_start(flags, capsys):
    with pytest.raises((UsageError, SystemExit)):
        _config(*flags)
