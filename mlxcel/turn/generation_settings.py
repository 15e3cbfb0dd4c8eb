"""llama-server's `generation_settings` object, for /props and native responses:
its fields, names, order and types (task_params::to_json). Float settings are
reported as llama.cpp holds them (float32); settings mlxcel does not serve (lazy
grammars, backend sampling) at the values that leave them off."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from mlxcel.engine.sampling import DEFAULT_SEED, SamplingParams
from mlxcel.turn.logit_bias import reported_logit_bias


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
    *,
    banned_eog: Iterable[int] = (),
    n_probs: int = 0,
    post_sampling_probs: bool = False,
    stream: bool = False,
    grammar: str = "",
    n_keep: int = 0,
    n_discard: int = 0,
    speculative: str = "none",
    reasoning_format: str = "deepseek",
    lora: tuple[float, ...] | None = None,
) -> dict:
    """`banned_eog`: the end-of-generation tokens `ignore_eos` bans, which llama-server
    lists in `logit_bias` after the request's own biases."""
    if seed is None:
        # a random seed reads as llama.cpp's LLAMA_DEFAULT_SEED, as llama-server reports it (a value it takes back)
        seed = DEFAULT_SEED if sampling.seed in (None, -1) else sampling.seed
    return {
        "seed": seed,
        "temperature": f32(sampling.temperature),
        "dynatemp_range": f32(sampling.dynatemp_range),
        "dynatemp_exponent": f32(sampling.dynatemp_exponent),
        "top_k": sampling.top_k,
        "top_p": f32(sampling.top_p),
        "min_p": f32(sampling.min_p),
        "top_n_sigma": f32(sampling.top_n_sigma),
        "xtc_probability": f32(sampling.xtc_probability),
        "xtc_threshold": f32(sampling.xtc_threshold),
        "typical_p": f32(sampling.typical_p),
        "repeat_last_n": sampling.repeat_last_n,
        "repeat_penalty": f32(sampling.repeat_penalty),
        "presence_penalty": f32(sampling.presence_penalty),
        "frequency_penalty": f32(sampling.frequency_penalty),
        "dry_multiplier": f32(sampling.dry_multiplier),
        "dry_base": f32(sampling.dry_base),
        "dry_allowed_length": sampling.dry_allowed_length,
        "dry_penalty_last_n": sampling.dry_penalty_last_n,
        "dry_sequence_breakers": list(sampling.dry_sequence_breakers),
        "mirostat": sampling.mirostat,
        "mirostat_tau": f32(sampling.mirostat_tau),
        "mirostat_eta": f32(sampling.mirostat_eta),
        "adaptive_target": f32(sampling.adaptive_target),
        "adaptive_decay": f32(sampling.adaptive_decay),
        "stop": list(stop or []),
        "max_tokens": n_predict,
        "n_predict": n_predict,
        "n_keep": n_keep,
        "n_discard": n_discard,
        "ignore_eos": ignore_eos,
        "stream": stream,
        "logit_bias": reported_logit_bias(sampling.logit_bias, sorted(banned_eog) if ignore_eos else []),
        "n_probs": n_probs,
        "min_keep": sampling.min_keep,
        "grammar": grammar,  # the request's GBNF text, as llama-server reports it
        "grammar_lazy": False,
        "grammar_triggers": [],
        "preserved_tokens": [],
        # how the text is parsed: plain completions are content only; chat output is
        # split into reasoning (<think> blocks) and content, as llama-server's deepseek
        "chat_format": "Content-only",
        "reasoning_format": reasoning_format,  # the server's --reasoning-format
        "reasoning_in_content": False,
        "generation_prompt": "",
        "samplers": list(sampling.samplers),
        "speculative.types": speculative,
        "timings_per_token": False,
        "post_sampling_probs": post_sampling_probs,
        "backend_sampling": False,
        # a request's own LoRA scales, one entry per loaded adapter; none: the server's
        "lora": [{"id": i, "scale": f32(scale)} for i, scale in enumerate(lora or ())],
    }
