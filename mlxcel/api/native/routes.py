"""llama-server's native routes: POST /completion, /tokenize, /detokenize."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from mlxcel.engine.request import FinishEvent, FinishReason, GenerationRequest, TokenEvent
from mlxcel.api.native.wire import DetokenizeRequest, NativeCompletionRequest, TokenizeRequest
from mlxcel.http.errors import as_api_error, invalid_request, server_error
from mlxcel.turn.errors import generation_error
from mlxcel.turn.generation import Completion, GenerationGroup
from mlxcel.turn.generation_settings import generation_settings
from mlxcel.http.opening import Opened, opening
from mlxcel.http.request_context import cancel_on_disconnect
from mlxcel.turn.request_builder import TurnShaping, build_requests, tokenize_prompts
from mlxcel.turn.structured_output import compile_grammar
from mlxcel.http.sse import EventStreamResponse, sse_data

router = APIRouter()
COMPLETION = opening(NativeCompletionRequest, "cmpl-")
TOKENIZE = opening(TokenizeRequest, "tok-")
DETOKENIZE = opening(DetokenizeRequest, "tok-")


def _stop_type(finish: FinishEvent) -> str:
    if finish.stopped_by_eos:
        return "eos"
    if finish.stop_word is not None:
        return "word"
    if finish.reason is FinishReason.LENGTH:
        return "limit"
    return "none"


def _final_body(
    index: int, content: str, result: Completion, request: GenerationRequest, model: str, return_tokens: bool
) -> dict:
    finish = result.finish
    return {
        "index": index,
        "content": content,
        "tokens": result.tokens if return_tokens else [],
        "id_slot": finish.slot_id if finish.slot_id is not None else -1,
        "stop": True,
        "model": model,
        "tokens_predicted": finish.completion_tokens,
        "tokens_evaluated": finish.prompt_tokens,
        "generation_settings": generation_settings(
            request.sampling, request.max_tokens, request.stop, request.ignore_eos, seed=finish.seed,
            grammar=getattr(request.constraint, "source", ""),
        ),
        "has_new_line": "\n" in result.text,
        "truncated": finish.truncated,
        "stop_type": _stop_type(finish),
        "stopping_word": finish.stop_word or "",
        "tokens_cached": finish.prompt_tokens + finish.completion_tokens,
        "timings": finish.timings.to_dict(),
    }


@router.post("/completion")
async def native_completion(request: Request, opened: Opened[NativeCompletionRequest] = Depends(COMPLETION)):
    host, body = opened.host, opened.body
    engine, tokenizer = host.engine, host.tokenizer
    if body.response_format is not None and body.response_format.get("type") != "text":
        raise invalid_request("response_format is not supported on /completion; use json_schema or grammar, "
                              "or /v1/chat/completions")
    grammar = body.output_grammar()
    prompts = await asyncio.to_thread(tokenize_prompts, tokenizer, body.prompt, host.config.limits.max_prompts)
    max_tokens = body.n_predict if body.n_predict is not None else body.max_tokens
    group = GenerationGroup(engine)
    constraints = [await compile_grammar(tokenizer, grammar) for _ in prompts]
    requests = build_requests(host, body, prompts, max_tokens, opened.context, group,
                              TurnShaping(constraints=constraints))
    group.submit(requests)
    if body.stream:
        return EventStreamResponse(_stream(group, host.model_id, body.return_tokens), on_close=group.cancel)
    async with cancel_on_disconnect(request, group.cancel):
        results = await group.collect()
    bodies = []
    for index, (result, req) in enumerate(zip(results, requests)):
        if result.finish.reason is FinishReason.ERROR:
            raise generation_error(result.finish)
        bodies.append(_final_body(index, result.text, result, req, host.model_id, body.return_tokens))
    return JSONResponse(bodies[0] if len(bodies) == 1 else bodies)


async def _stream(group: GenerationGroup, model: str, return_tokens: bool) -> AsyncIterator[str]:
    results = [Completion() for _ in group.requests]
    async for index, event in group.events():
        result = results[index]
        if isinstance(event, TokenEvent):
            result.tokens.append(event.token)
            result.parts.append(event.text)
            if event.text or return_tokens:
                yield sse_data(
                    {
                        "index": index,
                        "content": event.text,
                        "tokens": [event.token] if return_tokens else [],
                        "stop": False,
                        "id_slot": -1,
                        "tokens_predicted": len(result.tokens),
                        "tokens_evaluated": len(group.requests[index].prompt_tokens),
                    }
                )
            continue
        result.finish = event
        result.parts.append(event.text)
        if event.reason is FinishReason.ERROR:
            yield sse_data(as_api_error(generation_error(event)).body())
            continue
        yield sse_data(_final_body(index, event.text, result, group.requests[index], model, return_tokens))


@router.post("/tokenize")
async def tokenize(opened: Opened[TokenizeRequest] = Depends(TOKENIZE)):
    body, tokenizer = opened.body, opened.host.tokenizer
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
async def detokenize(opened: Opened[DetokenizeRequest] = Depends(DETOKENIZE)):
    body, tokenizer = opened.body, opened.host.tokenizer
    bad = tokenizer.first_out_of_range(body.tokens)
    if bad is not None:
        raise server_error(f"token id {bad} is out of vocabulary range (vocab_size {tokenizer.n_vocab})")
    return {"content": tokenizer.decode(body.tokens)}
