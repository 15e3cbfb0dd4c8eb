"""POST /v1/chat/completions (and /chat/completions), and llama-server's
POST /apply-template (the prompt a chat request renders to, not generated) and
POST /v1/chat/completions/input_tokens (its length in tokens)."""

from __future__ import annotations

import asyncio
import time

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from mlxcel.api.openai.chat_control import live_completions
from mlxcel.api.openai.chat_stream import StreamOptions, chat_stream, tool_call_json
from mlxcel.api.openai.chat_wire import ChatCompletionRequest, chat_body, chat_message, completion_details
from mlxcel.api.openai.completions_wire import usage_body
from mlxcel.api.openai.estimate import estimate_for
from mlxcel.api.openai.legacy_functions import finish_reason as legacy_finish
from mlxcel.api.openai.legacy_functions import function_call_message, legacy_messages, legacy_tools
from mlxcel.chat.continuation import resolve_ending
from mlxcel.chat.template_kwargs import resolve_template_kwargs
from mlxcel.http.opening import Opened, opening
from mlxcel.http.request_context import cancel_on_disconnect, run_while_connected
from mlxcel.http.sse import EventStreamResponse
from mlxcel.turn.chat_logprobs import LogprobFormatter
from mlxcel.turn.chat_turn import ChatOutcome, ChatTurn, ChatTurnSpec, RenderedTurn
from mlxcel.turn.completion_probs import before_stop_word
from mlxcel.turn.errors import InvalidRequest
from mlxcel.turn.live_completions import LiveCompletion
from mlxcel.turn.model_host import ModelHost
from mlxcel.turn.verbose import verbose_object

router = APIRouter()

# fields a chat request may carry that change nothing here (named in one warning line)
IGNORED_FIELDS = {"user", "metadata", "service_tier", "store", "modalities",
                  "audio", "web_search_options"}
HONORED_FIELDS = set(ChatCompletionRequest.model_fields) - IGNORED_FIELDS | {"extra_body", "cache_prompt", "dry_run"}
OPENING = opening(ChatCompletionRequest, "chatcmpl-", HONORED_FIELDS, IGNORED_FIELDS, api="chat")
APPLY_TEMPLATE = opening(ChatCompletionRequest, "tmpl-", api="chat")
COUNT_TOKENS = opening(ChatCompletionRequest, "tok-", api="chat")


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


def turn_spec(data: dict, body: ChatCompletionRequest, host: ModelHost) -> ChatTurnSpec:
    messages = legacy_messages([m.model_dump(exclude_none=True) for m in body.messages])
    functions = [f.model_dump(exclude_none=True) for f in body.functions] if body.functions is not None else None
    legacy = legacy_tools(functions, body.function_call, body.tools, body.tool_choice)
    tools, tool_choice = legacy or ([t.model_dump(exclude_none=True) for t in body.tools or []], body.tool_choice)
    if body.n > host.config.parallel:  # llama-server's bound: every choice takes a slot
        raise InvalidRequest(f"Field 'n': Value must be between 1 <= value <= {host.config.parallel}, "
                             f"but got {body.n}")
    if body.top_logprobs is not None and not body.logprobs:  # OpenAI's rule, in llama-server's words
        raise InvalidRequest("top_logprobs requires logprobs to be set to true")
    return ChatTurnSpec(
        messages=messages,
        sampling=body,
        tools=tools,
        tool_choice=tool_choice,
        response_format=body.response_format,
        grammar=body.grammar,
        json_schema=body.json_schema,
        template_kwargs=_template_kwargs(data, body, host.config.chat_template_kwargs),
        max_tokens=next((v for v in (body.max_completion_tokens, body.max_tokens, body.n_predict) if v is not None),
                        None),
        logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        thinking_budget=next((v for v in (body.thinking_budget, body.thinking_budget_tokens,
                                          body.reasoning_budget_tokens) if v is not None), None),
        reasoning_budget_message=body.reasoning_budget_message,
        reasoning_format=body.reasoning_format,
        reasoning_control=body.reasoning_control,
        ending=resolve_ending(messages, body.add_generation_prompt, body.continue_final_message,
                              host.config.prefill_assistant),
        n=body.n,
        prediction=body.prediction.text() if body.prediction is not None else None,
        max_tool_calls=1 if legacy is not None or body.parallel_tool_calls is False else None,
        report_progress=body.stream and (body.return_progress or body.timings_per_token),
        reply_repeats_continued=True,
    )


@router.post("/apply-template")
async def apply_template(opened: Opened[ChatCompletionRequest] = Depends(APPLY_TEMPLATE)):
    """llama-server's route: the prompt the same body would render to on chat."""
    spec = turn_spec(opened.data, opened.body, opened.host)
    rendered = await asyncio.to_thread(RenderedTurn.render, opened.host, spec)
    return JSONResponse({"prompt": rendered.prepared.prompt})


@router.post("/v1/chat/completions/input_tokens")
@router.post("/chat/completions/input_tokens")
async def count_input_tokens(opened: Opened[ChatCompletionRequest] = Depends(COUNT_TOKENS)):
    """llama-server's token count for a chat body: the prompt it would render to."""
    spec = turn_spec(opened.data, opened.body, opened.host)
    rendered = await RenderedTurn.prepare(opened.host, spec)
    return JSONResponse({"object": "response.input_tokens", "input_tokens": rendered.prompt_tokens})


@router.post("/v1/chat/completions")
@router.post("/chat/completions")
async def chat_completions(request: Request, opened: Opened[ChatCompletionRequest] = Depends(OPENING)):
    host, data, body, completion_id = opened.host, opened.data, opened.body, opened.id
    if data.get("dry_run") is True:  # 003: the admission estimate instead of a generation
        return JSONResponse(await estimate_for(request, data, body, host, opened.model_id))
    spec = turn_spec(data, body, host)
    turn = await run_while_connected(request, ChatTurn.start(host, spec, opened.context))  # media: its load too
    running = live_completions(request)
    running.add(completion_id, LiveCompletion(host.engine, tuple(g.id for g in turn.generations),
                                              body.reasoning_control))

    def ended() -> None:
        running.remove(completion_id)
        turn.cancel()

    created = int(time.time())
    verbose = host.config.verbose if body.verbose is None else body.verbose

    def verbose_of(outcome: ChatOutcome, text: str) -> dict:
        """`text`: the choice's streamed content; whole, the raw generated text."""
        tokens = [t.token for t in outcome.tokens]
        if not body.stream:
            text = "".join(t.text for t in outcome.tokens) + outcome.finish.text
        return verbose_object(outcome.index, turn.generations[outcome.index], outcome.finish, host.model_id,
                              turn.rendered.prepared.prompt, text, tokens, body.stream)

    if body.stream:
        options = StreamOptions(
            completion_id, created, host.model_id,
            include_usage=bool(body.stream_options and body.stream_options.include_usage),
            timings_per_token=body.timings_per_token, return_progress=body.return_progress,
            logprobs=body.logprobs, verbose=verbose_of if verbose else None,
            legacy_functions=body.functions is not None,
        )
        return EventStreamResponse(chat_stream(turn, options, lambda: LogprobFormatter(host.tokenizer)),
                                   on_close=ended, ping_seconds=body.ping_seconds(host.config.sse_ping_interval),
                                   resumable=True)
    try:
        async with cancel_on_disconnect(request, turn.cancel):
            outcomes = await turn.run_all()
    finally:
        running.remove(completion_id)
    logprobs = LogprobFormatter(host.tokenizer) if body.logprobs else None
    choices = []
    for outcome in outcomes:
        final = outcome.final
        message = chat_message(final.content, final.reasoning or None, [tool_call_json(c) for c in final.tool_calls])
        if outcome.reasoning_only:
            message["reasoning_only"] = True
        finish = outcome.finish_reason
        if body.functions is not None:
            message, finish = function_call_message(message), legacy_finish(finish)
        probed = before_stop_word(outcome.tokens, outcome.finish.stop_word, host.tokenizer) if logprobs else []
        choices.append({
            "index": outcome.index,
            "message": message,
            "finish_reason": finish,
            "logprobs": logprobs.whole(probed) if logprobs else None,
        })
    first = outcomes[0].finish
    usage = usage_body(first.prompt_tokens, sum(o.finish.completion_tokens for o in outcomes), first.cached_tokens)
    usage["completion_tokens_details"] = completion_details(outcomes)
    response = chat_body(completion_id, created, host.model_id, choices, usage)
    if verbose:
        response["__verbose"] = verbose_of(outcomes[0], outcomes[0].final.content)
    if first.timings.draft_rounds or body.timings_per_token:
        response["timings"] = first.timings.to_dict()
    return JSONResponse(response)
