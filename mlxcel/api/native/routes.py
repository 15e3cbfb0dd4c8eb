"""llama-server's native routes: POST /completion (and /completions), /tokenize, /detokenize."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

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
from mlxcel.turn.prompts import per_completion, tokenize_prompts
from mlxcel.turn.request_builder import TurnShaping, build_requests
from mlxcel.turn.structured_output import compile_grammar
from mlxcel.turn.completion_probs import CompletionProbs, requested_n_probs
from mlxcel.engine.tokenizer import Tokenizer
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


@dataclass
class _Answer:
    """What every body of one native completion shares."""

    model: str
    tokenizer: Tokenizer
    return_tokens: bool
    stream: bool
    n_probs: int  # as requested (generation_settings reports it)
    probs: CompletionProbs | None  # set when the request asked for probabilities
    speculative: str = "none"  # the server's speculation type, as generation_settings names it

    def final_body(self, index: int, content: str, result: Completion, request: GenerationRequest) -> dict:
        finish = result.finish
        body = {
            "index": index,
            "content": content,
            "tokens": result.tokens if self.return_tokens else [],
            "id_slot": finish.slot_id if finish.slot_id is not None else -1,
            "stop": True,
            "model": self.model,
            "tokens_predicted": finish.completion_tokens,
            "tokens_evaluated": finish.prompt_tokens,
            "generation_settings": generation_settings(
                request.sampling, request.max_tokens, request.stop, request.ignore_eos, seed=finish.seed,
                banned_eog=self.tokenizer.eog_tokens, n_probs=self.n_probs,
                post_sampling_probs=request.post_sampling_probs, stream=self.stream,
                grammar=getattr(request.constraint, "source", ""), n_keep=request.n_keep, n_discard=request.n_discard,
                speculative=self.speculative,
            ),
            "prompt": self.tokenizer.decode(request.prompt_tokens),
            "has_new_line": "\n" in result.text,
            "truncated": finish.truncated,
            "stop_type": _stop_type(finish),
            "stopping_word": finish.stop_word or "",
            "tokens_cached": finish.prompt_tokens + finish.completion_tokens,
            "timings": finish.timings.to_dict(),
        }
        if self.probs is not None and not self.stream:
            body["completion_probabilities"] = self.probs.entries(self._probed(result))
        return body

    def _probed(self, result: Completion) -> list[TokenEvent]:
        """The tokens whose probabilities a non-streamed answer lists: every generated
        one (the end-of-generation token included), less as many as the stop word
        tokenizes to, as llama-server cuts them."""
        events = list(result.events)
        finish = result.finish
        if finish.end_token is not None:
            events.append(finish.end_token)
        if finish.stop_word:
            cut = len(self.tokenizer.encode(finish.stop_word, add_special=False, parse_special=False))
            events = events[: max(0, len(events) - cut)]
        return events

    def partial(self, index: int, event: TokenEvent, n_predicted: int, n_prompt: int) -> dict:
        body = {
            "index": index,
            "content": event.text,
            "tokens": [event.token] if self.return_tokens else [],
            "stop": False,
            "id_slot": -1,
            "tokens_predicted": n_predicted,
            "tokens_evaluated": n_prompt,
        }
        if self.probs is not None:
            body["completion_probabilities"] = [self.probs.entry(event)]
        return body


def selected_fields(body: dict, fields: list[str] | None) -> dict:
    """llama-server's `response_fields`: only the named fields, a "a/b" path reaching
    into objects and keyed by the path as written; missing ones are left out."""
    if not fields:
        return body
    chosen = {}
    for path in fields:
        value, found = body, True
        for key in path.split("/"):
            if isinstance(value, dict) and key in value:
                value = value[key]
            else:
                found = False
                break
        if found:
            chosen[path] = value
    return chosen


@router.post("/completion")
@router.post("/completions")
async def native_completion(request: Request, opened: Opened[NativeCompletionRequest] = Depends(COMPLETION)):
    host, body = opened.host, opened.body
    engine, tokenizer = host.engine, host.tokenizer
    if body.response_format is not None and body.response_format.get("type") != "text":
        raise invalid_request("response_format is not supported on /completion; use json_schema or grammar, "
                              "or /v1/chat/completions")
    grammar = body.output_grammar()
    prompts = await asyncio.to_thread(tokenize_prompts, tokenizer, body.prompt, host.config.limits.max_prompts)
    prompts = per_completion(prompts, body.completions_per_prompt(), host.config.parallel)
    max_tokens = body.n_predict if body.n_predict is not None else body.max_tokens
    n_probs = requested_n_probs(body.wanted_probs())
    shaping = TurnShaping(logprobs=n_probs, post_sampling_probs=body.post_sampling_probs)
    group = GenerationGroup(engine)
    shaping.constraints = [await compile_grammar(tokenizer, grammar) for _ in prompts]
    requests = build_requests(host, body, prompts, max_tokens, opened.context, group, shaping)
    answer = _Answer(host.model_id, tokenizer, body.return_tokens, body.stream, body.wanted_probs() or 0,
                     CompletionProbs(tokenizer, body.post_sampling_probs) if n_probs is not None else None,
                     host.config.spec_type)
    group.submit(requests)
    if body.stream:
        return EventStreamResponse(_stream(group, answer), on_close=group.cancel,
                                   ping_seconds=body.ping_seconds(host.config.sse_ping_interval))
    async with cancel_on_disconnect(request, group.cancel):
        results = await group.collect()
    bodies = []
    for index, (result, req) in enumerate(zip(results, requests)):
        if result.finish.reason is FinishReason.ERROR:
            raise generation_error(result.finish)
        bodies.append(selected_fields(answer.final_body(index, result.text, result, req), body.response_fields))
    return JSONResponse(bodies[0] if len(bodies) == 1 else bodies)


async def _stream(group: GenerationGroup, answer: _Answer) -> AsyncIterator[str]:
    results = [Completion() for _ in group.requests]
    async for index, event in group.events():
        result = results[index]
        n_prompt = len(group.requests[index].prompt_tokens)
        if isinstance(event, TokenEvent):
            result.tokens.append(event.token)
            result.parts.append(event.text)
            if event.text or answer.return_tokens or answer.probs is not None:
                yield sse_data(answer.partial(index, event, len(result.tokens), n_prompt))
            continue
        result.finish = event
        result.parts.append(event.text)
        if event.reason is FinishReason.ERROR:
            yield sse_data(as_api_error(generation_error(event)).body())
            continue
        if event.end_token is not None:  # llama-server streams the end token's probabilities too
            yield sse_data(answer.partial(index, event.end_token, len(result.tokens) + 1, n_prompt))
        yield sse_data(answer.final_body(index, event.text, result, group.requests[index]))


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
