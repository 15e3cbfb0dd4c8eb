"""POST /v1/chat/completions (and /chat/completions)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mlxcel.chat.deltas import ParsedDelta, ToolCall, ToolCallDelta
from mlxcel.chat.output import ChatOutputParser, FinalChat
from mlxcel.chat.prompt import prepare_chat
from mlxcel.chat.template_kwargs import resolve_template_kwargs
from mlxcel.engine.request import FinishEvent, FinishReason, TokenEvent
from mlxcel.protocol.openai_chat import ChatCompletionRequest, chat_body, chat_message, chunk_body
from mlxcel.protocol.openai_completions import usage_body
from mlxcel.server.chat_logprobs import LogprobFormatter
from mlxcel.server.errors import invalid_request, server_error
from mlxcel.server.generation import GenerationGroup
from mlxcel.server.json_body import read_json_object, validate
from mlxcel.server.request_builder import build_requests
from mlxcel.server.structured_output import compile_forced_tool_call, compile_response_format
from mlxcel.structured.errors import StructuredOutputError
from mlxcel.server.sse import EventStreamResponse, sse_data

router = APIRouter()
log = logging.getLogger("mlxcel.chat")

# fields a chat request may carry that change nothing here (named in one warning line)
IGNORED_FIELDS = {"user", "metadata", "parallel_tool_calls", "service_tier", "store", "prediction", "modalities",
                  "audio", "web_search_options", "function_call", "functions", "logit_bias_type"}
HONORED_FIELDS = set(ChatCompletionRequest.model_fields) - IGNORED_FIELDS | {"extra_body", "cache_prompt"}


def _finish_reason(finish: FinishEvent, calls: list[ToolCall]) -> str:
    if finish.reason is FinishReason.ERROR:
        return "error"
    if calls:
        return "tool_calls"
    return "length" if finish.reason is FinishReason.LENGTH else "stop"


def _tool_call_json(call: ToolCall) -> dict:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _tool_delta_json(delta: ToolCallDelta) -> dict:
    if delta.name is not None:
        return {"index": delta.index, "id": delta.id, "type": "function",
                "function": {"name": delta.name, "arguments": delta.arguments}}
    return {"index": delta.index, "function": {"arguments": delta.arguments}}


def _reasoning_only(final: FinalChat, finish: FinishEvent) -> bool:
    return finish.completion_tokens > 0 and not final.content and not final.tool_calls and bool(final.reasoning)


def _warn_ignored(data: dict, request_id: str, n: int) -> None:
    ignored = sorted(k for k in data if k in IGNORED_FIELDS or k not in HONORED_FIELDS)
    if n > 1:
        ignored.append("n (one choice is returned)")
    if ignored:
        log.warning("request %s: accepted but ignored fields: %s", request_id, ", ".join(ignored))


async def _forced_call_constraint(host, tokenizer, tools: list[dict], request_id: str):
    """On JSON-wrapper formats a forced tool_choice is also a grammar, so the call comes.
    Other formats (or schemas the grammar engine cannot express) get the instruction only."""
    parser_cls = host.tool_parser_cls
    if parser_cls is None or not parser_cls.json_wrapper:
        return None
    description = parser_cls(tools).call_grammar(tools)
    if description is None:
        return None
    try:
        return await compile_forced_tool_call(tokenizer, description)
    except StructuredOutputError as exc:
        log.warning("request %s: forced tool_choice left unconstrained: %s", request_id, exc)
        return None


def _check_forced(forced: bool, final: FinalChat, request_id: str) -> None:
    if forced and not final.tool_calls:
        log.warning("request %s: tool_choice forced a call but the generation ended without one", request_id)


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(request: Request):
    host = request.app.state.host
    data = await read_json_object(request, host.config.max_body_bytes)
    body = validate(ChatCompletionRequest, data)
    engine, tokenizer = host.require_ready()
    constraint = await compile_response_format(tokenizer, body.response_format)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    kwargs = resolve_template_kwargs(data, host.config.chat_template_kwargs)
    if body.enable_thinking is not None:
        kwargs["enable_thinking"] = body.enable_thinking
    effort = body.reasoning_effort or (body.reasoning or {}).get("effort")
    if effort is not None:
        kwargs.setdefault("reasoning_effort", effort)
        if effort == "none":
            kwargs.setdefault("enable_thinking", False)
    prepared = prepare_chat(
        host.template,
        tokenizer,
        [m.model_dump(exclude_none=True) for m in body.messages],
        [t.model_dump(exclude_none=True) for t in body.tools or []],
        body.tool_choice,
        kwargs,
    )
    max_tokens = next((v for v in (body.max_completion_tokens, body.max_tokens, body.n_predict) if v is not None), None)
    (generation,) = build_requests(host, request, body, [prepared.tokens], max_tokens)
    if constraint is not None and prepared.plan.forced:
        raise invalid_request("a forced tool_choice cannot be combined with a constraining response_format")
    if prepared.plan.forced:
        constraint = await _forced_call_constraint(host, tokenizer, prepared.plan.tools, completion_id)
    generation.constraint = constraint
    if body.logprobs:
        generation.logprobs = body.top_logprobs or 0
    budget = body.thinking_budget if body.thinking_budget is not None else body.thinking_budget_tokens
    if budget is not None and budget >= 0 and prepared.parse_reasoning:
        generation.reasoning_budget = budget
        generation.reasoning_close_tokens = tokenizer.encode("</think>\n\n", add_special=False, parse_special=True)
        generation.reasoning_open_at_start = prepared.start_in_reasoning
    _warn_ignored(data, completion_id, body.n)
    forced = prepared.plan.forced
    parser = ChatOutputParser(
        parse_reasoning=prepared.parse_reasoning,
        start_in_reasoning=prepared.start_in_reasoning,
        tool_parser_cls=host.tool_parser_cls,
        tools=prepared.plan.tools,
        request_id=completion_id,
    )
    group = GenerationGroup(engine, [generation])
    group.submit()
    created = int(time.time())
    logprobs = LogprobFormatter(tokenizer) if body.logprobs else None
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return EventStreamResponse(
            _stream(group, parser, logprobs, completion_id, created, host.model_id, include_usage,
                    body.timings_per_token, forced)
        )

    (result,) = await group.collect(request)
    finish = result.finish
    if finish.reason is FinishReason.ERROR:
        raise server_error(f"generation failed: {finish.error}")
    parser.feed(result.text)
    final, _ = parser.final()
    _check_forced(prepared.plan.forced, final, completion_id)
    message = chat_message(final.content, final.reasoning or None, [_tool_call_json(c) for c in final.tool_calls])
    if _reasoning_only(final, finish):
        message["reasoning_only"] = True
    choice = {
        "index": 0,
        "message": message,
        "finish_reason": _finish_reason(finish, final.tool_calls),
        "logprobs": logprobs.whole(result.events) if logprobs else None,
    }
    usage = usage_body(finish.prompt_tokens, finish.completion_tokens, finish.cached_tokens)
    return JSONResponse(chat_body(completion_id, created, host.model_id, choice, usage))


async def _stream(
    group: GenerationGroup,
    parser: ChatOutputParser,
    logprobs: LogprobFormatter | None,
    completion_id: str,
    created: int,
    model: str,
    include_usage: bool,
    timings_per_token: bool,
    forced: bool,
) -> AsyncIterator[str]:
    def chunk(delta: dict, finish_reason: str | None = None, token_logprobs: dict | None = None, n: int = 0) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": token_logprobs}
        body = chunk_body(completion_id, created, model, [choice])
        if timings_per_token:
            body["timings"] = {"predicted_n": n}
        return sse_data(body)

    def delta_json(parsed: ParsedDelta, extra_calls: list[ToolCallDelta] = ()) -> dict:
        delta: dict = {}
        if parsed.reasoning:
            delta["reasoning_content"] = parsed.reasoning
        if parsed.content:
            delta["content"] = parsed.content
        calls = [*parsed.tool_calls, *extra_calls]
        if calls:
            delta["tool_calls"] = [_tool_delta_json(c) for c in calls]
        return delta

    yield chunk({"role": "assistant"})
    n_tokens = 0
    async for _, event in group.events():
        if isinstance(event, TokenEvent):
            n_tokens += 1
            delta = delta_json(parser.feed(event.text))
            if logprobs is not None:
                yield chunk(delta or {"content": ""}, token_logprobs=logprobs.chunk(event), n=n_tokens)
            elif delta:
                yield chunk(delta, n=n_tokens)
            continue
        tail = parser.feed(event.text)
        tail.extend(parser.finish())
        final, owed = parser.final()
        _check_forced(forced, final, completion_id)
        delta = delta_json(tail, owed)
        if delta:
            yield chunk(delta, n=n_tokens)
        finish_delta = {"reasoning_only": True} if _reasoning_only(final, event) else {}
        yield chunk(finish_delta, _finish_reason(event, final.tool_calls), n=n_tokens)
        if include_usage:
            usage = usage_body(event.prompt_tokens, event.completion_tokens, event.cached_tokens)
            yield sse_data(chunk_body(completion_id, created, model, [], usage))
    yield sse_data("[DONE]")
