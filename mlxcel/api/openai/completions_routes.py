"""POST /v1/completions: OpenAI legacy text completions (/completions is the native route)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from mlxcel.api.openai.completions_logprobs import LegacyLogprobs, requested_logprobs
from mlxcel.api.openai.completions_wire import CompletionRequest, completion_body, completion_choice, usage_body
from mlxcel.engine.request import FinishEvent, FinishReason, TokenEvent
from mlxcel.http.opening import Opened, opening
from mlxcel.http.request_context import cancel_on_disconnect, run_while_connected
from mlxcel.http.sse import EventStreamResponse, sse_data
from mlxcel.turn.completion_probs import before_stop_word
from mlxcel.turn.errors import generation_error
from mlxcel.turn.generation import GenerationGroup
from mlxcel.turn.media_input import completion_prompts
from mlxcel.turn.prompts import per_completion
from mlxcel.turn.request_builder import TurnShaping, build_requests, seed_choices
from mlxcel.turn.structured_output import compile_grammar, with_server_grammar

router = APIRouter()
OPENING = opening(CompletionRequest, "cmpl-", api="completions")


def finish_reason(event: FinishEvent) -> str:
    return {FinishReason.LENGTH: "length", FinishReason.ERROR: "error"}.get(event.reason, "stop")


@router.post("/v1/completions")
async def create_completion(request: Request, opened: Opened[CompletionRequest] = Depends(OPENING)):
    host, body, completion_id = opened.host, opened.body, opened.id
    engine, tokenizer = host.engine, host.tokenizer
    prompts, layouts = await run_while_connected(  # media: a client that leaves stops its load
        request, completion_prompts(host, body.prompt, host.config.limits.max_prompts))
    prompts = per_completion(prompts, body.n, host.config.parallel)  # choice i*n + j: prompt i's j-th
    max_tokens = body.max_tokens if body.max_tokens is not None else body.n_predict
    grammar = with_server_grammar(body.output_grammar(body.response_format),
                                  (body.grammar, body.json_schema, body.response_format), host.default_grammar)
    constraints = [await compile_grammar(tokenizer, grammar) for _ in prompts]
    k = requested_logprobs(body.logprobs)
    group = GenerationGroup(engine)
    requests = build_requests(host, body, prompts, max_tokens, opened.context, group,
                              TurnShaping(constraints=constraints, logprobs=k))
    for generation, media in zip(requests, per_completion(layouts, body.n, host.config.parallel)):
        generation.media = media
    seed_choices(requests, body.n)
    group.submit(requests)
    created = int(time.time())
    echoes = [body.prompt if isinstance(body.prompt, str) else tokenizer.decode(p) for p in prompts] if body.echo else None
    logprobs = None
    if k is not None:
        logprobs = [LegacyLogprobs(tokenizer, len(echoes[i]) if echoes else 0) for i in range(len(prompts))]
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return EventStreamResponse(
            _stream(group, completion_id, created, host.model_id, include_usage, echoes, logprobs, body.n),
            on_close=group.cancel,
            ping_seconds=body.ping_seconds(host.config.sse_ping_interval),
            resumable=True,
        )

    async with cancel_on_disconnect(request, group.cancel):
        results = await group.collect()
    choices, prompt_tokens, completion_tokens, cached = [], 0, 0, 0
    for index, result in enumerate(results):
        finish = result.finish
        if finish.reason is FinishReason.ERROR:
            raise generation_error(finish)
        text = (echoes[index] if echoes else "") + result.text
        probed = before_stop_word(result.events, finish.stop_word, tokenizer) if logprobs else []
        choices.append(completion_choice(index, text, finish_reason(finish),
                                         logprobs[index].of(probed) if logprobs else None))
        if index % body.n == 0:  # a prompt and its cached part count once, however many completions it has
            prompt_tokens += finish.prompt_tokens
            cached += finish.cached_tokens
        completion_tokens += finish.completion_tokens
    usage = usage_body(prompt_tokens, completion_tokens, cached)
    return JSONResponse(completion_body(completion_id, created, host.model_id, choices, usage, stream=False))


async def _stream(
    group: GenerationGroup,
    completion_id: str,
    created: int,
    model: str,
    include_usage: bool,
    echoes: list[str] | None,
    logprobs: list[LegacyLogprobs] | None,
    n: int = 1,
) -> AsyncIterator[str]:
    def chunk(index: int, text: str, reason: str | None, token_logprobs: dict | None = None) -> str:
        choice = completion_choice(index, text, reason, token_logprobs, stream=True)
        return sse_data(completion_body(completion_id, created, model, [choice], None, stream=True))

    prompt_tokens = completion_tokens = cached = 0
    for index, echo in enumerate(echoes or []):
        yield chunk(index, echo, None)
    async for index, event in group.events():
        if logprobs and isinstance(event, TokenEvent):  # a chunk per token, each with its logprobs
            yield chunk(index, event.text, None, logprobs[index].of([event]))
        elif event.text:
            yield chunk(index, event.text, None)
        if isinstance(event, FinishEvent):
            yield chunk(index, "", finish_reason(event))
            if index % n == 0:  # a prompt and its cached part count once, however many completions it has
                prompt_tokens += event.prompt_tokens
                cached += event.cached_tokens
            completion_tokens += event.completion_tokens
    if include_usage:
        usage = usage_body(prompt_tokens, completion_tokens, cached)
        yield sse_data(completion_body(completion_id, created, model, [], usage, stream=True))
    yield sse_data("[DONE]")
