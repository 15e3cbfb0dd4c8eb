"""`serve` flags for RoPE and YaRN, as llama-server names them: a model served past
its trained context (YaRN, linear or NTK-style base scaling)."""

from __future__ import annotations

import argparse

from mlxcel.cli.arg_types import ranged
from mlxcel.engine.rope import SCALING_TYPES, RopeSettings


class RopeUsageError(ValueError):
    pass


def _scaling(value: str) -> str:
    if value.lower() not in SCALING_TYPES:
        raise argparse.ArgumentTypeError(f"must be one of: {', '.join(SCALING_TYPES)}")
    return value.lower()


_POSITIVE = ranged(float, 1e-6, 1e9, what="a positive number")
_FACTOR = ranged(float, -1.0, 1e6, what="between -1 (the model's) and 1e6")

# (flags, dest, type, default, env, help): the shape of serve_args' value options
ROPE_OPTIONS = [
    (("--rope-scaling",), "rope_scaling", _scaling, None, "LLAMA_ARG_ROPE_SCALING_TYPE",
     "RoPE frequency scaling: none, linear or yarn (default: the model's)"),
    (("--rope-scale",), "rope_scale", _POSITIVE, None, "LLAMA_ARG_ROPE_SCALE",
     "RoPE context scaling factor: the context expands by N (--rope-freq-scale 1/N)"),
    (("--rope-freq-base",), "rope_freq_base", _POSITIVE, None, "LLAMA_ARG_ROPE_FREQ_BASE",
     "RoPE base frequency, as NTK-aware scaling sets it (default: the model's)"),
    (("--rope-freq-scale",), "rope_freq_scale", _POSITIVE, None, "LLAMA_ARG_ROPE_FREQ_SCALE",
     "RoPE frequency scaling factor: the context expands by 1/N (default: the model's)"),
    (("--yarn-orig-ctx",), "yarn_orig_ctx", ranged(int, 0, 1 << 24), 0, "LLAMA_ARG_YARN_ORIG_CTX",
     "YaRN: the model's original context (0: its trained context)"),
    (("--yarn-ext-factor",), "yarn_ext_factor", _FACTOR, -1.0, "LLAMA_ARG_YARN_EXT_FACTOR",
     "YaRN: extrapolation mix factor, 0 for full interpolation (-1: 1 under YaRN, else 0)"),
    (("--yarn-attn-factor",), "yarn_attn_factor", _FACTOR, -1.0, "LLAMA_ARG_YARN_ATTN_FACTOR",
     "YaRN: attention magnitude scale (-1: the model's)"),
    (("--yarn-beta-slow",), "yarn_beta_slow", _FACTOR, -1.0, "LLAMA_ARG_YARN_BETA_SLOW",
     "YaRN: high correction dimension, alpha (-1: the model's)"),
    (("--yarn-beta-fast",), "yarn_beta_fast", _FACTOR, -1.0, "LLAMA_ARG_YARN_BETA_FAST",
     "YaRN: low correction dimension, beta (-1: the model's)"),
]


def rope_settings(args: argparse.Namespace) -> RopeSettings:
    """The context's RoPE settings; a RopeUsageError for contradictory flags."""
    if args.rope_scale is not None and args.rope_freq_scale is not None:
        raise RopeUsageError("--rope-scale N and --rope-freq-scale 1/N say the same thing: give one")
    freq_scale = 1.0 / args.rope_scale if args.rope_scale is not None else (args.rope_freq_scale or 0.0)
    return RopeSettings(scaling=args.rope_scaling, freq_base=args.rope_freq_base or 0.0, freq_scale=freq_scale,
                        yarn_orig_ctx=args.yarn_orig_ctx, yarn_ext_factor=args.yarn_ext_factor,
                        yarn_attn_factor=args.yarn_attn_factor, yarn_beta_fast=args.yarn_beta_fast,
                        yarn_beta_slow=args.yarn_beta_slow)
