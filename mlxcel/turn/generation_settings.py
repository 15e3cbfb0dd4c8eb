"""llama-server's `generation_settings` object, for /props and native responses."""

from __future__ import annotations

from mlxcel.engine.sampling import DEFAULT_SEED, SamplingParams

U64_MAX = 18446744073709551615


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
        "temperature": sampling.temperature,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "typical_p": sampling.typical_p,
        "repeat_penalty": sampling.repeat_penalty,
        "repeat_last_n": sampling.repeat_last_n,
        "frequency_penalty": sampling.frequency_penalty,
        "presence_penalty": sampling.presence_penalty,
        "top_n_sigma": sampling.top_n_sigma,
        "dry_multiplier": sampling.dry_multiplier,
        "dry_base": sampling.dry_base,
        "dry_allowed_length": sampling.dry_allowed_length,
        "dry_penalty_last_n": sampling.dry_penalty_last_n,
        "dry_sequence_breakers": list(sampling.dry_sequence_breakers),
        "xtc_probability": sampling.xtc_probability,
        "xtc_threshold": sampling.xtc_threshold,
        "stop": list(stop or []),
        "ignore_eos": ignore_eos,
        "grammar": grammar,  # the request's GBNF text, as llama-server reports it
    }
