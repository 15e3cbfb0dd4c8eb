"""llama-server's `generation_settings` object, for /props and native responses:
its fields, names and types (task_params::to_json). Settings llama-server has and
mlxcel does not serve (mirostat, dynamic temperature, adaptive-p, n_keep, LoRA) are
reported at the values that leave them off."""

from __future__ import annotations

from collections.abc import Iterable

from mlxcel.engine.sampling import DEFAULT_SEED, SamplingParams
from mlxcel.turn.logit_bias import reported_logit_bias

U64_MAX = 18446744073709551615
# the order of mlxcel's sampler chain, in llama-server's names (logit bias runs first)
SAMPLERS = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")


def generation_settings(
    sampling: SamplingParams,
    n_predict: int,
    stop: list[str] | None = None,
    ignore_eos: bool = False,
    seed: int | None = None,
    *,
    banned_eog: Iterable[int] = (),
    n_probs: int = 0,
    post_sampling_probs: bool = False,
    stream: bool = False,
    grammar: str = "",
) -> dict:
    """`banned_eog`: the end-of-generation tokens `ignore_eos` bans, which llama-server
    lists in `logit_bias` after the request's own biases."""
    if seed is None:
        seed = U64_MAX if sampling.seed in (None, -1, DEFAULT_SEED) else sampling.seed
    return {
        "seed": seed,
        "temperature": sampling.temperature,
        "dynatemp_range": 0.0,
        "dynatemp_exponent": 1.0,
        "top_k": sampling.top_k,
        "top_p": sampling.top_p,
        "min_p": sampling.min_p,
        "top_n_sigma": sampling.top_n_sigma,
        "xtc_probability": sampling.xtc_probability,
        "xtc_threshold": sampling.xtc_threshold,
        "typical_p": sampling.typical_p,
        "repeat_last_n": sampling.repeat_last_n,
        "repeat_penalty": sampling.repeat_penalty,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "dry_multiplier": sampling.dry_multiplier,
        "dry_base": sampling.dry_base,
        "dry_allowed_length": sampling.dry_allowed_length,
        "dry_penalty_last_n": sampling.dry_penalty_last_n,
        "dry_sequence_breakers": list(sampling.dry_sequence_breakers),
        "mirostat": 0,
        "mirostat_tau": 5.0,
        "mirostat_eta": 0.1,
        "adaptive_target": -1.0,
        "adaptive_decay": 0.9,
        "stop": list(stop or []),
        "max_tokens": n_predict,
        "n_predict": n_predict,
        "n_keep": 0,
        "n_discard": 0,
        "ignore_eos": ignore_eos,
        "stream": stream,
        "logit_bias": reported_logit_bias(sampling.logit_bias, sorted(banned_eog) if ignore_eos else []),
        "n_probs": n_probs,
        "min_keep": sampling.min_keep,
        "grammar": grammar,
        "grammar_lazy": False,
        "grammar_triggers": [],
        "preserved_tokens": [],
        "samplers": list(SAMPLERS),
        "timings_per_token": False,
        "post_sampling_probs": post_sampling_probs,
        "backend_sampling": False,
        "lora": [],
    }
