"""llama-server's `generation_settings` object, for /props and native responses."""

from __future__ import annotations

import struct

from mlxcel.engine.sampling import DEFAULT_SEED, SamplingParams

U64_MAX = 18446744073709551615


def f32(value: float) -> float:
    """A setting as llama.cpp holds it (float32), so 0.95 reads 0.949999988079071 as in
    llama-server's JSON."""
    return struct.unpack("f", struct.pack("f", value))[0]


def generation_settings(
    sampling: SamplingParams,
    n_predict: int,
    stop: list[str] | None = None,
    ignore_eos: bool = False,
    seed: int | None = None,
    grammar: str = "",
) -> dict:
    if seed is None:
        seed = U64_MAX if sampling.seed in (None, -1, DEFAULT_SEED) else sampling.seed
    return {
        "n_predict": n_predict,
        "seed": seed,
        "temperature": f32(sampling.temperature),
        "top_k": sampling.top_k,
        "top_p": f32(sampling.top_p),
        "min_p": f32(sampling.min_p),
        "typical_p": f32(sampling.typical_p),
        "repeat_penalty": f32(sampling.repeat_penalty),
        "repeat_last_n": sampling.repeat_last_n,
        "frequency_penalty": f32(sampling.frequency_penalty),
        "presence_penalty": f32(sampling.presence_penalty),
        "top_n_sigma": f32(sampling.top_n_sigma),
        "dry_multiplier": f32(sampling.dry_multiplier),
        "dry_base": f32(sampling.dry_base),
        "dry_allowed_length": sampling.dry_allowed_length,
        "dry_penalty_last_n": sampling.dry_penalty_last_n,
        "dry_sequence_breakers": list(sampling.dry_sequence_breakers),
        "xtc_probability": f32(sampling.xtc_probability),
        "xtc_threshold": f32(sampling.xtc_threshold),
        "dynatemp_range": f32(sampling.dynatemp_range),
        "dynatemp_exponent": f32(sampling.dynatemp_exponent),
        "mirostat": sampling.mirostat,
        "mirostat_tau": f32(sampling.mirostat_tau),
        "mirostat_eta": f32(sampling.mirostat_eta),
        "adaptive_target": f32(sampling.adaptive_target),
        "adaptive_decay": f32(sampling.adaptive_decay),
        "min_keep": sampling.min_keep,
        "samplers": list(sampling.samplers),
        "stop": list(stop or []),
        "ignore_eos": ignore_eos,
        "grammar": grammar,  # the request's GBNF text, as llama-server reports it
    }
