"""Which weights go to llama.cpp's CPU_REPACK buffers where AMX is skipped: llama.cpp's
own verdict, tensor by tensor, on GGUF files written here and on the catalog models,
and the load that takes them."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import gguf
import llama_cpp
import numpy as np
import pytest

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.engine import cpu_repack, llama_runtime, weight_buffers
from mlxcel.engine.llama_runtime import model_params
from mlxcel.models.catalog import CATALOG
from mlxcel.models.store import model_path
from mlxcel.turn.model_host import _runtime_config

Q = gguf.GGMLQuantizationType


def _catalog(name: str) -> Path:
    path = model_path(CATALOG[name])
    if not path.exists():
        pytest.fail(f"{name} is not pulled: run `mlxcel pull {name}` (the README's setup does)")
    return path


def _x86_with_avx2() -> bool:
    return "AVX2 = 1" in llama_cpp.llama_print_system_info().decode(errors="replace")


def _write(path: Path, tensors: dict[str, tuple[Q, tuple[int, int]]]) -> Path:
    """A GGUF holding these weights (name: type, (ne0, ne1)), quantized from noise."""
    writer = gguf.GGUFWriter(str(path), "llama")
    rng = np.random.default_rng(0)
    for name, (qtype, (ne0, ne1)) in tensors.items():
        data = rng.standard_normal((ne1, ne0), dtype=np.float32)
        writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.skipif(not _x86_with_avx2(), reason="CPU_REPACK's x86 kernels need AVX2")
def test_only_matrices_that_cpu_repack_runs_are_named(tmp_path):
    path = _write(tmp_path / "w.gguf", {
        "blk.0.ffn_up.weight": (Q.Q4_0, (64, 32)),  # Q4_0, 32 rows: taken
        "blk.0.attn_q.weight": (Q.Q4_0, (64, 12)),  # rows not a multiple of 8: refused by llama.cpp
        "blk.0.ffn_down.weight": (Q.Q8_0, (64, 32)),  # Q8_0 has no x86 repacked kernel
        "token_embd.weight": (Q.Q4_0, (64, 32)),  # read by GET_ROWS, never repacked
        "blk.0.attn_norm_like.weight": (Q.Q4_0, (64, 32)),  # not a matrix the graph multiplies by
        "output.weight": (Q.Q4_0, (64, 64)),
    })
    assert cpu_repack.repacked_weights(path) == ["blk.0.ffn_up.weight", "output.weight"]
    overrides, n = cpu_repack.repack_overrides(path)
    assert n == 2 and overrides[n].pattern is None  # NULL-terminated
    assert [overrides[i].pattern for i in range(n)] == [rb"^blk\.0\.ffn_up\.weight$", rb"^output\.weight$"]
    assert overrides[0].buft == cpu_repack._ggml().extra_buffer_type("CPU_REPACK") != 0


@pytest.mark.skipif(not _x86_with_avx2(), reason="CPU_REPACK's x86 kernels need AVX2")
def test_the_catalog_models_weights():
    # SmolLM2 is Q4_1 throughout, which CPU_REPACK does not take; of Qwen2.5-Coder-0.5B's
    # Q4_K_M only the Q4_K feed-forward down projections (896 wide is no multiple of 256:
    # its other matrices are Q5_0 / Q6_K / Q8_0)
    assert cpu_repack.repacked_weights(_catalog("smollm2-135m-instruct")) == []
    names = cpu_repack.repacked_weights(_catalog("qwen2.5-coder-0.5b-instruct"))
    assert len(names) == 12 and all(name.endswith(".ffn_down.weight") for name in names)


def test_an_unreadable_file_names_none(tmp_path):
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf")
    assert cpu_repack.repacked_weights(tmp_path / "missing.gguf") == []
    assert cpu_repack.repacked_weights(tmp_path / "bad.gguf") == []
    assert cpu_repack.repack_overrides(tmp_path / "missing.gguf") == (None, 0)
    os.mkfifo(tmp_path / "pipe.gguf")  # not opened here: the loader reads a pipe once, and a reader would block
    assert cpu_repack.repacked_weights(tmp_path / "pipe.gguf") == []


def _params(argv: list[str], path: Path):
    return model_params(_runtime_config(parse_serve_args(argv), path, 512))


@pytest.mark.skipif(not _x86_with_avx2(), reason="CPU_REPACK's x86 kernels need AVX2")
def test_where_amx_is_avoided_the_weights_still_go_to_cpu_repack(monkeypatch, tmp_path):
    path = _write(tmp_path / "w.gguf", {"blk.0.ffn_up.weight": (Q.Q4_0, (64, 32))})
    monkeypatch.setattr(weight_buffers, "amx_would_hold_weights", lambda: True)
    params = _params([], path)
    assert params.use_extra_bufts is False and params.tensor_buft_overrides
    assert params._tensor_overrides[0].pattern == rb"^blk\.0\.ffn_up\.weight$"
    for flags in (["--no-repack"], ["--repack"]):  # a flag decides alone: no overrides
        assert not _params(flags, path).tensor_buft_overrides
    monkeypatch.setattr(weight_buffers, "amx_would_hold_weights", lambda: False)
    assert _params([], path).use_extra_bufts is True and not _params([], path).tensor_buft_overrides


@pytest.mark.skipif(not _x86_with_avx2(), reason="CPU_REPACK's x86 kernels need AVX2")
def test_llama_cpp_loads_qwen_with_the_overrides_and_decodes_as_plain_weights_do(monkeypatch):
    """The overrides load (a weight CPU_REPACK cannot hold would abort it) and put the
    weights there; greedy tokens from a short prompt match the plain load's."""
    path = _catalog("qwen2.5-coder-0.5b-instruct")
    lines: list[str] = []
    logged: list[str] = []

    @llama_cpp.llama_log_callback
    def capture(_level, text, _user_data):
        lines.append(text.decode("utf-8", errors="replace"))

    def decode(params) -> list[int]:
        lines.clear()
        llama_cpp.llama_log_set(capture, ctypes.c_void_p(0))
        try:
            return _greedy(params)
        finally:
            llama_cpp.llama_log_set(llama_runtime._llama_log, ctypes.c_void_p(0))
            logged.append("".join(lines))

    def _greedy(params) -> list[int]:
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        assert model
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_threads, cp.n_threads_batch = 256, 64, 2, 2
        ctx = llama_cpp.llama_init_from_model(model, cp)
        vocab = llama_cpp.llama_model_get_vocab(model)
        n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
        text = b"def fibonacci(n):"
        tokens = (llama_cpp.llama_token * 64)()
        n = llama_cpp.llama_tokenize(vocab, text, len(text), tokens, 64, True, False)
        out, batch = [], llama_cpp.llama_batch_get_one(tokens, n)
        try:
            for _ in range(8):
                assert llama_cpp.llama_decode(ctx, batch) == 0
                row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
                out.append(int(row.argmax()))
                token = (llama_cpp.llama_token * 1)(out[-1])
                batch = llama_cpp.llama_batch_get_one(token, 1)
        finally:
            llama_cpp.llama_free(ctx)
            llama_cpp.llama_model_free(model)
        return out

    monkeypatch.setattr(weight_buffers, "amx_would_hold_weights", lambda: True)
    repacked = decode(_params([], path))
    plain = decode(_params(["--no-repack"], path))
    assert "CPU_REPACK model buffer size" in logged[0] and "CPU_REPACK" not in logged[1]
    assert repacked == plain
