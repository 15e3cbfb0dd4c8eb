"""From validated wire fields to engine requests: prompts, sampling, limits."""

from __future__ import annotations

import dataclasses

from fastapi import Request

from mlxcel.config import ServerConfig
from mlxcel.engine.request import GenerationRequest, Priority
from mlxcel.engine.sampling import SamplingParams
from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.protocol.sampling_fields import SamplingFields
from mlxcel.server.errors import invalid_request

MAX_PROMPTS = 64


def resolve_sampling(fields: SamplingFields, defaults: SamplingParams) -> SamplingParams:
    """Request values over the server's defaults (llama-server and OpenAI names)."""
    chosen = {
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
    return dataclasses.replace(defaults, **{k: v for k, v in chosen.items() if v is not None})


def tokenize_prompts(tokenizer: Tokenizer, prompt) -> list[list[int]]:
    """A prompt is a string, a token array, a mixed array of strings and tokens (one
    prompt), or an array of strings / token arrays (several prompts)."""
    if isinstance(prompt, str):
        prompts = [prompt]
    elif prompt and all(isinstance(p, int) for p in prompt):
        prompts = [prompt]
    elif prompt and all(isinstance(p, (str, list)) for p in prompt) and len(prompt) > 1:
        prompts = list(prompt)
    else:
        prompts = [prompt]
    if not prompts or len(prompts) > MAX_PROMPTS:
        raise invalid_request(f"prompt: between 1 and {MAX_PROMPTS} prompts are accepted")
    return [_tokenize_one(tokenizer, p) for p in prompts]


def _tokenize_one(tokenizer: Tokenizer, prompt) -> list[int]:
    if isinstance(prompt, str):
        tokens = tokenizer.encode(prompt, add_special=True, parse_special=True)
    else:
        tokens = []
        for i, part in enumerate(prompt):
            if isinstance(part, str):
                tokens += tokenizer.encode(part, add_special=(i == 0), parse_special=True)
            elif isinstance(part, int):
                tokens.append(part)
            else:
                tokens += part
    bad = tokenizer.first_out_of_range(tokens)
    if bad is not None:
        raise invalid_request(f"prompt: token id {bad} is out of vocabulary range (vocab_size {tokenizer.n_vocab})")
    if not tokens:
        raise invalid_request("prompt: the prompt is empty")
    return tokens


def check_fits(tokens: list[int], n_ctx_slot: int) -> None:
    if len(tokens) >= n_ctx_slot:
        raise invalid_request(
            f"the prompt has {len(tokens)} tokens, which does not fit the per-slot context of "
            f"{n_ctx_slot} tokens: prompts must be shorter than {n_ctx_slot} tokens",
            code="context_length_exceeded",
            n_prompt_tokens=len(tokens),
            n_ctx=n_ctx_slot,
        )


def build_requests(
    config: ServerConfig,
    n_ctx_slot: int,
    http_request: Request,
    fields: SamplingFields,
    prompts: list[list[int]],
    max_tokens: int | None,
) -> list[GenerationRequest]:
    sampling = resolve_sampling(fields, config.sampling)
    cache_prompt = fields.extra_cache_prompt()
    priority = Priority.from_header(http_request.headers.get("x-priority"))
    requests = []
    for tokens in prompts:
        check_fits(tokens, n_ctx_slot)
        requests.append(
            GenerationRequest(
                prompt_tokens=tokens,
                emit=_unset_emit,
                sampling=dataclasses.replace(sampling),
                max_tokens=config.n_predict if max_tokens is None else max_tokens,
                stop=list(fields.stop or []),
                ignore_eos=fields.ignore_eos,
                priority=priority,
                cache_prompt=True if cache_prompt is None else cache_prompt,
            )
        )
    return requests


def _unset_emit(_event) -> None:  # replaced by GenerationGroup before submission
    raise RuntimeError("request submitted without an event sink")
