"""llama-server's native routes: POST /completion (and /completions), /tokenize, /detokenize."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from mlxcel.api.native.answer import CompletionAnswer, NativeStreamOptions, selected_fields
from mlxcel.api.native.wire import DetokenizeRequest, NativeCompletionRequest, TokenizeRequest
from mlxcel.engine.request import FinishReason, PromptProgressEvent, TokenEvent
from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.http.errors import as_api_error, invalid_request, server_error
from mlxcel.http.opening import Opened, opening
from mlxcel.http.request_context import cancel_on_disconnect, run_while_connected
from mlxcel.http.sse import EventStreamResponse, sse_data
from mlxcel.turn.completion_probs import CompletionProbs, requested_n_probs
from mlxcel.turn.errors import generation_error
from mlxcel.turn.generation import Completion, GenerationGroup
from mlxcel.turn.live_timings import LiveTimings
from mlxcel.turn.media_input import completion_prompts
from mlxcel.turn.prompts import per_completion
from mlxcel.turn.request_builder import TurnShaping, build_requests, seed_choices
from mlxcel.turn.structured_output import compile_grammar, with_server_grammar

router = APIRouter()
COMPLETION = opening(NativeCompletionRequest, "cmpl-", api="native")
TOKENIZE = opening(TokenizeRequest, "tok-", vocabulary_only=True)
DETOKENIZE = opening(DetokenizeRequest, "tok-", vocabulary_only=True)


@router.post("/completion")
@router.post("/completions")
async def native_completion(request: Request, opened: Opened[NativeCompletionRequest] = Depends(COMPLETION)):
    host, body = opened.host, opened.body
    engine, tokenizer = host.engine, host.tokenizer
    if body.response_format is not None and body.response_format.get("type") != "text":
        raise invalid_request("response_format is not supported on /completion; use json_schema or grammar, "
                              "or /v1/chat/completions")
    grammar = with_server_grammar(body.output_grammar(), (body.grammar, body.json_schema, body.response_format),
                                  host.default_grammar)
    prompts, layouts = await run_while_connected(  # media: a client that leaves stops its load
        request, completion_prompts(host, body.prompt, host.config.limits.max_prompts))
    n_each = body.completions_per_prompt()
    prompts = per_completion(prompts, n_each, host.config.parallel)
    max_tokens = body.n_predict if body.n_predict is not None else body.max_tokens
    n_probs = requested_n_probs(body.wanted_probs())
    shaping = TurnShaping(logprobs=n_probs, post_sampling_probs=body.post_sampling_probs)
    group = GenerationGroup(engine)
    shaping.constraints = [await compile_grammar(tokenizer, grammar) for _ in prompts]
    requests = build_requests(host, body, prompts, max_tokens, opened.context, group, shaping)
    for generation, media in zip(requests, per_completion(layouts, n_each, host.config.parallel)):
        generation.media = media
        generation.report_progress = body.stream and (body.return_progress or body.timings_per_token)
    seed_choices(requests, n_each)
    answer = CompletionAnswer(host.model_id, tokenizer, body.return_tokens, body.stream, body.wanted_probs() or 0,
                     CompletionProbs(tokenizer, body.post_sampling_probs) if n_probs is not None else None,
                     host.config.spec_type)
    group.submit(requests)
    if body.stream:
        return EventStreamResponse(_stream(group, answer, NativeStreamOptions(body.timings_per_token,
                                                                              body.return_progress)),
                                   on_close=group.cancel,
                                   ping_seconds=body.ping_seconds(host.config.sse_ping_interval), resumable=True)
    async with cancel_on_disconnect(request, group.cancel):
        results = await group.collect()
    bodies = []
    for index, (result, req) in enumerate(zip(results, requests)):
        if result.finish.reason is FinishReason.ERROR:
            raise generation_error(result.finish)
        bodies.append(selected_fields(answer.final_body(index, result.text, result, req), body.response_fields))
    return JSONResponse(bodies[0] if len(bodies) == 1 else bodies)


async def _stream(group: GenerationGroup, answer: CompletionAnswer, options: NativeStreamOptions) -> AsyncIterator[str]:
    results = [Completion() for _ in group.requests]
    live = [LiveTimings() for _ in group.requests] if options.timings_per_token else None
    async for index, event in group.events():
        result = results[index]
        n_prompt = len(group.requests[index].prompt_tokens)
        taken_by = group.requests[index].taken_by
        id_slot = -1 if taken_by is None else taken_by  # llama-server's -1 before a slot takes it
        if isinstance(event, PromptProgressEvent):
            if live is not None:
                live[index].progress(event)
            if options.return_progress:  # llama-server's progress chunk, its `tokens: [0]` included
                yield sse_data({"index": index, "content": "", "tokens": [0], "stop": False, "id_slot": id_slot,
                                "tokens_predicted": 0, "tokens_evaluated": n_prompt,
                                "prompt_progress": {"total": event.total, "cache": event.cache,
                                                    "processed": event.processed, "time_ms": event.time_ms}})
            continue
        if isinstance(event, TokenEvent):
            result.tokens.append(event.token)
            result.parts.append(event.text)
            if live is not None:
                live[index].token()
            if event.text or answer.return_tokens or answer.probs is not None:
                chunk = answer.partial(index, event, len(result.tokens), n_prompt, id_slot)
                if live is not None:
                    chunk["timings"] = live[index].to_dict()
                yield sse_data(chunk)
            continue
        result.finish = event
        result.parts.append(event.text)
        if event.reason is FinishReason.ERROR:
            yield sse_data(as_api_error(generation_error(event)).body())
            continue
        if event.end_token is not None:  # llama-server streams the end token's probabilities too
            yield sse_data(answer.partial(index, event.end_token, len(result.tokens) + 1, n_prompt, id_slot))
        yield sse_data(answer.final_body(index, event.text, result, group.requests[index]))


def vocabulary_of(request: Request, opened: Opened) -> Tokenizer:
    """The chat model's tokenizer; with --embedding or --reranking (no chat model), the
    served model's, as llama-server tokenizes with whatever model it serves."""
    if not opened.host.absent:
        return opened.host.tokenizer
    worker = request.app.state.served_worker
    worker.require_ready()
    return worker.tokenizer


@router.post("/tokenize")
async def tokenize(request: Request, opened: Opened[TokenizeRequest] = Depends(TOKENIZE)):
    body, tokenizer = opened.body, vocabulary_of(request, opened)
    # tokenizing and rendering a long text's answer are CPU work: off the event loop
    return await asyncio.to_thread(_tokenize_response, tokenizer, body)


def _tokenize_response(tokenizer, body: TokenizeRequest) -> JSONResponse:
    tokens = tokenizer.encode(body.content, add_special=body.add_special, parse_special=body.parse_special)
    if not body.with_pieces:
        return JSONResponse({"tokens": tokens})
    pieces = []
    for token in tokens:
        raw = tokenizer.special_piece(token)
        try:
            piece: str | list[int] = raw.decode("utf-8")
        except UnicodeDecodeError:
            piece = list(raw)
        pieces.append({"id": token, "piece": piece})
    return JSONResponse({"tokens": pieces})


@router.post("/detokenize")
async def detokenize(request: Request, opened: Opened[DetokenizeRequest] = Depends(DETOKENIZE)):
    body, tokenizer = opened.body, vocabulary_of(request, opened)
    # checking and decoding a long list (millions of ids: seconds) are CPU work: off the event loop
    return await asyncio.to_thread(_detokenize_response, tokenizer, body.tokens)


def _detokenize_response(tokenizer, tokens: list[int]) -> JSONResponse:
    bad = tokenizer.first_out_of_range(tokens)
    if bad is not None:
        # spec 001's error table: "a /detokenize id outside the vocabulary" is its one 500 (llama-server's too)
        raise server_error(f"token id {bad} is out of vocabulary range (vocab_size {tokenizer.n_vocab})")
    return JSONResponse({"content": tokenizer.decode(tokens)})  # rendered here too: the text may be megabytes
