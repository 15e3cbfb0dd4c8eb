"""POST /v1/chat/completions (and /chat/completions)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from mlxcel.chat.deltas import ParsedDelta, ToolCall, ToolCallDelta
from mlxcel.chat.template_kwargs import resolve_template_kwargs
from mlxcel.api.openai.chat_wire import ChatCompletionRequest, chat_body, chat_message, chunk_body
from mlxcel.api.openai.completions_wire import usage_body
from mlxcel.turn.chat_logprobs import LogprobFormatter
from mlxcel.turn.chat_turn import ChatOutcome, ChatTurn, ChatTurnSpec
from mlxcel.http.opening import Opened, opening
from mlxcel.http.request_context import cancel_on_disconnect
from mlxcel.http.sse import EventStreamResponse, sse_data

router = APIRouter()

# fields a chat request may carry that change nothing here (named in one warning line)
IGNORED_FIELDS = {"user", "metadata", "parallel_tool_calls", "service_tier", "store", "prediction", "modalities",
                  "audio", "web_search_options", "function_call", "functions"}
HONORED_FIELDS = set(ChatCompletionRequest.model_fields) - IGNORED_FIELDS | {"extra_body", "cache_prompt"}
OPENING = opening(ChatCompletionRequest, "chatcmpl-", HONORED_FIELDS, IGNORED_FIELDS,
                  lambda body: ["n (one choice is returned)"] if body.n > 1 else [])


def _tool_call_json(call: ToolCall) -> dict:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _tool_delta_json(delta: ToolCallDelta) -> dict:
    if delta.name is not None:
        return {"index": delta.index, "id": delta.id, "type": "function",
                "function": {"name": delta.name, "arguments": delta.arguments}}
    return {"index": delta.index, "function": {"arguments": delta.arguments}}


def _template_kwargs(data: dict, body: ChatCompletionRequest, server_defaults: dict) -> dict:
    kwargs = resolve_template_kwargs(data, server_defaults)
    if body.enable_thinking is not None:
        kwargs["enable_thinking"] = body.enable_thinking
    effort = body.reasoning_effort or (body.reasoning or {}).get("effort")
    if effort is not None:
        kwargs.setdefault("reasoning_effort", effort)
        if effort == "none":
            kwargs.setdefault("enable_thinking", False)
    return kwargs


def turn_spec(data: dict, body: ChatCompletionRequest, server_template_kwargs: dict) -> ChatTurnSpec:
    return ChatTurnSpec(
        messages=[m.model_dump(exclude_none=True) for m in body.messages],
        sampling=body,
        tools=[t.model_dump(exclude_none=True) for t in body.tools or []],
        tool_choice=body.tool_choice,
        response_format=body.response_format,
        grammar=body.grammar,
        json_schema=body.json_schema,
        template_kwargs=_template_kwargs(data, body, server_template_kwargs),
        max_tokens=next((v for v in (body.max_completion_tokens, body.max_tokens, body.n_predict) if v is not None),
                        None),
        logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        thinking_budget=body.thinking_budget if body.thinking_budget is not None else body.thinking_budget_tokens,
    )


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(request: Request, opened: Opened[ChatCompletionRequest] = Depends(OPENING)):
    host, data, body, completion_id = opened.host, opened.data, opened.body, opened.id
    spec = turn_spec(data, body, host.config.chat_template_kwargs)
    turn = await ChatTurn.start(host, spec, opened.context)
    created = int(time.time())
    logprobs = LogprobFormatter(host.tokenizer) if body.logprobs else None
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return EventStreamResponse(
            _stream(turn, logprobs, completion_id, created, host.model_id, include_usage, body.timings_per_token),
            on_close=turn.cancel,
        )
    async with cancel_on_disconnect(request, turn.cancel):
        outcome = await turn.run()
    final = outcome.final
    message = chat_message(final.content, final.reasoning or None, [_tool_call_json(c) for c in final.tool_calls])
    if outcome.reasoning_only:
        message["reasoning_only"] = True
    choice = {
        "index": 0,
        "message": message,
        "finish_reason": outcome.finish_reason,
        "logprobs": logprobs.whole(outcome.tokens) if logprobs else None,
    }
    finish = outcome.finish
    usage = usage_body(finish.prompt_tokens, finish.completion_tokens, finish.cached_tokens)
    body = chat_body(completion_id, created, host.model_id, choice, usage)
    if finish.timings.draft_rounds:
        body["timings"] = finish.timings.to_dict()
    return JSONResponse(body)


def _delta_json(parsed: ParsedDelta, extra_calls: list[ToolCallDelta] = ()) -> dict:
    delta: dict = {}
    if parsed.reasoning:
        delta["reasoning_content"] = parsed.reasoning
    if parsed.content:
        delta["content"] = parsed.content
    calls = [*parsed.tool_calls, *extra_calls]
    if calls:
        delta["tool_calls"] = [_tool_delta_json(c) for c in calls]
    return delta


async def _stream(
    turn: ChatTurn,
    logprobs: LogprobFormatter | None,
    completion_id: str,
    created: int,
    model: str,
    include_usage: bool,
    timings_per_token: bool,
) -> AsyncIterator[str]:
    def chunk(delta: dict, finish_reason: str | None = None, token_logprobs: dict | None = None, n: int = 0) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": token_logprobs}
        body = chunk_body(completion_id, created, model, [choice])
        if timings_per_token:
            body["timings"] = {"predicted_n": n}
        return sse_data(body)

    yield chunk({"role": "assistant"})
    n_tokens = 0
    async for step in turn.stream():
        if isinstance(step, ChatOutcome):
            delta = _delta_json(step.tail, step.owed)
            if delta:
                yield chunk(delta, n=n_tokens)
            finish_chunk = chunk_body(completion_id, created, model, [{
                "index": 0, "delta": {"reasoning_only": True} if step.reasoning_only else {},
                "finish_reason": step.finish_reason, "logprobs": None}])
            if step.finish.timings.draft_rounds:
                finish_chunk["timings"] = step.finish.timings.to_dict()
            elif timings_per_token:
                finish_chunk["timings"] = {"predicted_n": n_tokens}
            yield sse_data(finish_chunk)
            if include_usage:
                finish = step.finish
                usage = usage_body(finish.prompt_tokens, finish.completion_tokens, finish.cached_tokens)
                yield sse_data(chunk_body(completion_id, created, model, [], usage))
            continue
        n_tokens += 1
        delta = _delta_json(step.delta)
        if logprobs is not None:
            yield chunk(delta or {"content": ""}, token_logprobs=logprobs.chunk(step.token), n=n_tokens)
        elif delta:
            yield chunk(delta, n=n_tokens)
    yield sse_data("[DONE]")
