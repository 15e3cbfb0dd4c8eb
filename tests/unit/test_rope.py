"""RoPE and YaRN flags (llama-server's --rope-* and --yarn-*): parsed, refused when
they contradict, and reaching llama.cpp's context (its logits and its YaRN-adjusted
trained context change)."""

from __future__ import annotations

import numpy as np
import pytest

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.cli.usage import UsageError
from mlxcel.engine.rope import RopeSettings
from tests.runtime_logits import smollm2_logits


def test_the_flags_as_llama_server_reads_them(monkeypatch):
    config = parse_serve_args(["--rope-scaling", "YaRN", "--rope-scale", "4", "--yarn-orig-ctx", "8192",
                               "--yarn-ext-factor", "0.5", "--yarn-beta-fast", "32", "--rope-freq-base", "500000"])
    assert config.rope == RopeSettings(scaling="yarn", freq_base=500000.0, freq_scale=0.25, yarn_orig_ctx=8192,
                                       yarn_ext_factor=0.5, yarn_beta_fast=32.0)
    assert config.ignored_flags == []  # implemented, not named among the ignored
    assert parse_serve_args(["--rope-freq-scale", "0.5"]).rope.freq_scale == 0.5
    assert parse_serve_args([]).rope.is_default
    monkeypatch.setenv("LLAMA_ARG_ROPE_SCALE", "2")
    assert parse_serve_args([]).rope.freq_scale == 0.5


@pytest.mark.parametrize("argv, message", [
    (["--rope-scale", "4", "--rope-freq-scale", "0.25"], "give one"),
    (["--rope-scaling", "ntk"], "none, linear, yarn"),
    (["--rope-scale", "0"], "positive"),
    (["--rope-freq-base", "-10000"], "positive"),
    (["--rope-freq-base", "inf"], "finite"),
    (["--yarn-orig-ctx", "-1"], "out of range"),
    (["--yarn-attn-factor", "nan"], "finite"),
])
def test_contradictions_and_nonsense_fail_the_start_in_one_line(argv, message):
    with pytest.raises(UsageError, match=message):
        parse_serve_args(argv)


def _last_logits(rope: RopeSettings) -> tuple[np.ndarray, int]:
    return smollm2_logits(rope=rope)


def test_the_settings_reach_the_context():
    plain, trained = _last_logits(RopeSettings())
    again, _ = _last_logits(RopeSettings())
    base, _ = _last_logits(RopeSettings(freq_base=1000.0))
    yarn, yarn_trained = _last_logits(RopeSettings(scaling="yarn", freq_scale=0.25, yarn_orig_ctx=2048))
    assert np.array_equal(plain, again)  # the same settings, the same numbers
    assert np.abs(base - plain).max() > 0.1  # another base frequency moves every position's rotation
    assert np.abs(yarn - plain).max() > 0.1
    assert trained == 8192 and yarn_trained == 2048 * 4  # llama.cpp's YaRN re-adjusts the trained context


def test_the_served_model_gets_them_and_its_draft_keeps_its_own(tmp_path):
    from mlxcel.turn.model_host import _runtime_config

    config = parse_serve_args(["--rope-freq-base", "1000", "--rope-scaling", "linear"])
    assert _runtime_config(config, tmp_path / "m.gguf", 256).rope == RopeSettings(scaling="linear", freq_base=1000.0)
    assert _runtime_config(config, tmp_path / "d.gguf", 256, draft=True).rope.is_default
