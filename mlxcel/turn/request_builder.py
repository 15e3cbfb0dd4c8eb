"""From validated request fields to complete engine requests: prompts, sampling,
limits, and what a chat turn adds. Every GenerationRequest is built here."""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mlxcel.engine.constraints import TokenConstraint
from mlxcel.engine.loop_detection import LOOP_ENV_VAR, LOOP_FIELDS, resolve_loop_policy
from mlxcel.engine.lora import LoraError, requested_scales
from mlxcel.engine.request import GenerationRequest
from mlxcel.engine.sampler_order import parse_sampler_order
from mlxcel.engine.sampling import DEFAULT_SEED, SamplingParams
from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.turn.context import RequestContext
from mlxcel.turn.errors import ContextOverflow, InvalidRequest, PromptTooLong
from mlxcel.turn.logit_bias import parse_logit_bias
from mlxcel.turn.prompt_log import prompt_log
from mlxcel.turn.sampling_fields import SamplingFields

if TYPE_CHECKING:
    from mlxcel.turn.generation import GenerationGroup
    from mlxcel.turn.model_host import ModelHost

log = logging.getLogger("mlxcel.turn")


def resolve_sampling(fields: SamplingFields, defaults: SamplingParams, tokenizer: Tokenizer) -> SamplingParams:
    """Request values over the server's defaults (llama-server and OpenAI names)."""
    chosen = {
        "top_n_sigma": fields.top_n_sigma,
        "p_less": fields.p_less,
        "dry_multiplier": fields.dry_multiplier,
        "dry_base": fields.dry_base,
        "dry_allowed_length": fields.dry_allowed_length,
        "dry_penalty_last_n": fields.dry_penalty_last_n,
        "xtc_probability": fields.xtc_probability,
        "xtc_threshold": fields.xtc_threshold,
        "dynatemp_range": fields.dynatemp_range,
        "dynatemp_exponent": fields.dynatemp_exponent,
        "mirostat": fields.mirostat,
        "mirostat_tau": fields.mirostat_tau,
        "mirostat_eta": fields.mirostat_eta,
        "adaptive_target": fields.adaptive_target,
        "adaptive_decay": fields.adaptive_decay,
        "min_keep": fields.min_keep,
        "temperature": fields.temperature,
        "top_k": fields.top_k,
        "top_p": fields.top_p,
        "min_p": fields.min_p,
        "typical_p": fields.typical_p,
        "repeat_penalty": fields.repeat_penalty if fields.repeat_penalty is not None else fields.repetition_penalty,
        "repeat_last_n": fields.repeat_last_n if fields.repeat_last_n is not None else fields.repetition_context_size,
        "frequency_penalty": fields.frequency_penalty,
        "presence_penalty": fields.presence_penalty,
        "seed": fields.seed,
    }
    if fields.dry_sequence_breakers is not None:
        chosen["dry_sequence_breakers"] = tuple(_breaker_text(b, tokenizer) for b in fields.dry_sequence_breakers)
    if fields.samplers is not None:
        try:
            chosen["samplers"] = parse_sampler_order(fields.samplers)
        except ValueError as exc:
            raise InvalidRequest(f"samplers: {exc}") from None
    if fields.logit_bias is not None:
        chosen["logit_bias"] = parse_logit_bias(fields.logit_bias, tokenizer)
    return dataclasses.replace(defaults, **{k: v for k, v in chosen.items() if v is not None})


def _breaker_text(breaker: int | str, tokenizer: Tokenizer) -> str:
    if isinstance(breaker, str):
        return breaker
    if not 0 <= breaker < tokenizer.n_vocab:
        raise InvalidRequest(f"dry_sequence_breakers: token id {breaker} is out of vocabulary range")
    return tokenizer.special_piece(breaker).decode("utf-8", errors="replace")


def _slot(id_slot: int | None, n_parallel: int) -> int:
    if id_slot is None or id_slot < 0:
        return -1
    if id_slot >= n_parallel:
        raise InvalidRequest(f"id_slot {id_slot} does not exist: the server has slots 0 to {n_parallel - 1}")
    return id_slot


def check_fits(tokens: list[int], n_ctx_slot: int) -> None:
    """A prompt must leave the slot room for at least one generated token (llama-server's
    check, with or without context shift)."""
    if len(tokens) >= n_ctx_slot:
        raise ContextOverflow(len(tokens), n_ctx_slot)


def clamp_max_tokens(max_tokens: int, n_ctx_slot: int, context_shift: bool = False) -> int:
    """Without context shift, a generation limit past the slot's context means "until
    the context is full", which is what -1 already says; the clamp is logged. With it,
    generation goes on past the context's end, so the limit stands."""
    if max_tokens > n_ctx_slot and not context_shift:
        log.info("max_tokens %d exceeds the slot context of %d tokens: generation stops at the context's end",
                 max_tokens, n_ctx_slot)
        return n_ctx_slot
    return max_tokens


def seed_choices(requests: list[GenerationRequest], n: int) -> None:
    """A seeded request's `n` completions per prompt sample as llama-server's child tasks
    do: completion j (of requests laid out prompt-major) with seed + j, so the choices
    differ and the whole answer still repeats. A random seed stays random."""
    for index, generation in enumerate(requests):
        seed, choice = generation.sampling.seed, index % n
        if choice and seed is not None and 0 <= seed != DEFAULT_SEED:
            generation.sampling.seed = (seed + choice) % DEFAULT_SEED


def resolve_loop_detection(fields: SamplingFields, model_family: str | None) -> tuple[int, int, int] | None:
    request_fields = {name: getattr(fields, name) for name in LOOP_FIELDS}
    try:
        return resolve_loop_policy(request_fields, os.environ.get(LOOP_ENV_VAR), model_family)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None


@dataclass
class TurnShaping:
    """What a chat turn adds to its generation: output constraint, logprobs and the
    thinking budget (the markers of the reasoning block and the tokens that close it)."""

    constraints: list[TokenConstraint | None] = field(default_factory=list)  # one per prompt, if any
    logprobs: int | None = None
    post_sampling_probs: bool = False  # logprobs as the sampler chain's probabilities (llama-server's n_probs)
    reasoning_budget: int | None = None
    reasoning_markers: tuple[str, str] = ("", "")
    reasoning_close_tokens: list[int] = field(default_factory=list)
    reasoning_open_at_start: bool = False
    prediction: list[int] = field(default_factory=list)  # the reply's predicted tokens (drafted from)


def request_lora(entries: list[dict] | None, adapters: list) -> tuple[float, ...] | None:
    """A request's `lora` list as a scale per loaded adapter (the ones it does not list
    at 0, as llama-server reads it); None when it has none (or an empty one): it runs
    with the server's scales. An id that names no adapter is a 400."""
    if not entries:
        return None
    try:
        return tuple(requested_scales(adapters, entries))
    except LoraError as exc:
        raise InvalidRequest(str(exc)) from None


def build_requests(
    host: ModelHost,
    fields: SamplingFields,
    prompts: list[list[int]],
    max_tokens: int | None,
    context: RequestContext,
    group: GenerationGroup,
    shaping: TurnShaping | None = None,
) -> list[GenerationRequest]:
    """The engine requests for `prompts`: every field set here, the event sink
    included (request i emits into `group.sink(i)`)."""
    config, tokenizer, n_ctx_slot = host.config, host.tokenizer, host.slot_context
    lora = request_lora(fields.lora, host.runtime.loras if host.runtime is not None else []) if fields.lora else None
    shaping = shaping or TurnShaping()
    sampling = resolve_sampling(fields, config.sampling, tokenizer)
    loop_detection = resolve_loop_detection(fields, host.model_family)
    cache_prompt = fields.extra_cache_prompt()
    limit = clamp_max_tokens(config.n_predict if max_tokens is None else max_tokens, n_ctx_slot, config.context_shift)
    if config.log_prompts_dir:  # --log-prompts-dir
        prompt_log(config.log_prompts_dir).write([tokenizer.decode(tokens) for tokens in prompts])
    requests = []
    for index, tokens in enumerate(prompts):
        if config.context_budget:  # 003 (many models): prompt + max_tokens within the window
            budget = max_tokens if max_tokens is not None and max_tokens > 0 else 0
            if len(tokens) + max(budget, 1) > n_ctx_slot:
                raise PromptTooLong(len(tokens), budget or None, n_ctx_slot)
        check_fits(tokens, n_ctx_slot)
        requests.append(
            GenerationRequest(
                prompt_tokens=tokens,
                emit=group.sink(index),
                sampling=dataclasses.replace(sampling),
                max_tokens=limit,
                stop=list(fields.stop or config.default_stop),
                ignore_eos=fields.ignore_eos or config.ignore_eos,
                n_keep=fields.n_keep if fields.n_keep is not None else config.n_keep,
                n_discard=fields.n_discard or 0,
                id_slot=_slot(fields.id_slot, config.parallel),
                n_indent=fields.n_indent or 0,
                t_max_predict_ms=float(fields.t_max_predict_ms or 0),
                priority=context.priority,
                cache_prompt=True if cache_prompt is None else cache_prompt,
                cache_reuse=fields.n_cache_reuse,
                lora=lora,
                logprobs=shaping.logprobs,
                post_sampling_probs=shaping.post_sampling_probs,
                loop_detection=loop_detection,
                reasoning_budget=shaping.reasoning_budget,
                reasoning_markers=shaping.reasoning_markers,
                reasoning_close_tokens=list(shaping.reasoning_close_tokens),
                reasoning_open_at_start=shaping.reasoning_open_at_start,
                constraint=shaping.constraints[index] if index < len(shaping.constraints) else None,
                prediction=list(shaping.prediction),
                fault=context.fault,
            )
        )
    return requests
