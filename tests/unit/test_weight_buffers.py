"""--repack / --no-repack, and the default that keeps llama.cpp's AMX kernels (which
crash on the first prompt) away from the weights."""

from __future__ import annotations

import pytest

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.engine import weight_buffers
from mlxcel.engine.llama_runtime import model_params
from mlxcel.turn.model_host import _runtime_config

SAPPHIRE_RAPIDS = "processor\t: 0\nflags\t\t: fpu sse avx512f amx_bf16 amx_tile amx_int8 avx512_vnni\n"
ZEN4 = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_vnni avx512_bf16\n"
BUILD_AMX = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | REPACK = 1 | "
BUILD_PLAIN = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | REPACK = 1 | "


def test_amx_is_read_from_the_cpu_flags_and_the_build():
    assert weight_buffers.cpu_has_amx(SAPPHIRE_RAPIDS)
    assert not weight_buffers.cpu_has_amx(ZEN4)
    assert not weight_buffers.cpu_has_amx("processor\t: 0\nmodel name\t: amx_int8 in a name only\n")
    assert weight_buffers.build_has_amx(BUILD_AMX)
    assert not weight_buffers.build_has_amx(BUILD_PLAIN)
    assert not weight_buffers.build_has_amx(BUILD_AMX.replace("AMX_INT8 = 1", "AMX_INT8 = 0"))


@pytest.fixture
def amx_host(monkeypatch):
    """Pretend to be a host whose llama.cpp would hold the weights in AMX buffers (or not)."""

    def pretend(would: bool) -> None:
        monkeypatch.setattr(weight_buffers, "amx_would_hold_weights", lambda: would)

    return pretend


@pytest.mark.parametrize("amx", [True, False])
def test_a_flag_decides_and_the_default_avoids_amx(amx_host, amx, monkeypatch, caplog):
    amx_host(amx)
    monkeypatch.setattr(weight_buffers, "_said", False)
    assert weight_buffers.repack_weights(True) and not weight_buffers.repack_weights(False)
    assert weight_buffers.repack_weights(None) is (not amx)
    assert weight_buffers.repack_weights(None) is (not amx)  # a second model: said once only
    assert weight_buffers.reference_repack_flags() == (["--no-repack"] if amx else [])
    said = [r.getMessage() for r in caplog.records if "weight repacking without AMX" in r.getMessage()]
    assert len(said) == (1 if amx else 0) and all("--repack" in line for line in said)


def test_the_flags_reach_llama_cpps_params(amx_host, tmp_path, monkeypatch):
    amx_host(True)

    def extra_bufts(argv):
        return model_params(_runtime_config(parse_serve_args(argv), tmp_path / "m.gguf", 512)).use_extra_bufts

    assert parse_serve_args([]).repack is None
    assert extra_bufts([]) is False
    assert extra_bufts(["--repack"]) is True
    assert extra_bufts(["--no-repack"]) is False and extra_bufts(["-nr"]) is False
    amx_host(False)
    assert extra_bufts([]) is True and extra_bufts(["-nr"]) is False
    monkeypatch.setenv("LLAMA_ARG_REPACK", "0")
    assert parse_serve_args([]).repack is False and parse_serve_args(["--repack"]).repack is True


def test_the_flags_are_no_longer_accepted_and_ignored():
    config = parse_serve_args(["--no-repack"])
    assert config.ignored_flags == [] and config.repack is False
