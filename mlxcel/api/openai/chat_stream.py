"""The SSE chunks of a streamed chat completion: a role chunk per choice, then each
choice's deltas as its tokens come (choices interleave, each chunk names its index),
its finish chunk, and the usage chunk once every choice has finished.

llama-server's extras ride on the chunks: `timings` on every chunk with
`timings_per_token`, `prompt_progress` chunks while the prompt prefills with
`return_progress`, and the `__verbose` object on a choice's first final chunk."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from mlxcel.api.openai.chat_wire import chunk_body, completion_details
from mlxcel.api.openai.completions_wire import usage_body
from mlxcel.api.openai.legacy_functions import finish_reason as legacy_finish
from mlxcel.api.openai.legacy_functions import function_call_delta
from mlxcel.chat.deltas import ParsedDelta, ToolCall, ToolCallDelta
from mlxcel.http.sse import sse_data
from mlxcel.turn.chat_logprobs import LogprobFormatter
from mlxcel.turn.chat_turn import ChatOutcome, ChatProgress, ChatTurn
from mlxcel.turn.live_timings import LiveTimings


def tool_call_json(call: ToolCall) -> dict:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _tool_delta_json(delta: ToolCallDelta) -> dict:
    if delta.name is not None:
        return {"index": delta.index, "id": delta.id, "type": "function",
                "function": {"name": delta.name, "arguments": delta.arguments}}
    return {"index": delta.index, "function": {"arguments": delta.arguments}}


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


@dataclass
class StreamOptions:
    completion_id: str
    created: int
    model: str
    include_usage: bool = False
    timings_per_token: bool = False
    return_progress: bool = False
    logprobs: bool = False
    verbose: Callable[[ChatOutcome, str], dict] | None = None  # the choice's __verbose object
    legacy_functions: bool = False  # the request used `functions`: calls go out as function_call


@dataclass
class _Choice:
    timings: LiveTimings = field(default_factory=LiveTimings)
    logprobs: LogprobFormatter | None = None
    # the content so far, for `__verbose` only (a list: a str grown by += is copied
    # whole on every token)
    text: list[str] | None = None


async def chat_stream(turn: ChatTurn, options: StreamOptions, new_logprobs: Callable[[], LogprobFormatter]
                      ) -> AsyncIterator[str]:
    o = options
    choices = [_Choice(logprobs=new_logprobs() if o.logprobs else None, text=[] if o.verbose is not None else None)
               for _ in turn.generations]

    def body(index: int, delta: dict, finish_reason: str | None = None, token_logprobs: dict | None = None) -> dict:
        choice = {"index": index, "delta": delta, "finish_reason": finish_reason, "logprobs": token_logprobs}
        return chunk_body(o.completion_id, o.created, o.model, [choice])

    def chunk(index: int, delta: dict, token_logprobs: dict | None = None) -> str:
        out = body(index, delta, None, token_logprobs)
        if o.timings_per_token:
            out["timings"] = choices[index].timings.to_dict()
        return sse_data(out)

    for index in range(len(choices)):
        yield sse_data(body(index, {"role": "assistant"}))
    outcomes: list[ChatOutcome] = []
    async for step in turn.stream():
        choice = choices[step.index]
        if isinstance(step, ChatProgress):
            choice.timings.progress(step.progress)
            if o.return_progress:
                out = body(step.index, {"role": "assistant", "content": None})
                if o.timings_per_token:
                    out["timings"] = choice.timings.to_dict()
                out["prompt_progress"] = {"total": step.progress.total, "cache": step.progress.cache,
                                          "processed": step.progress.processed, "time_ms": step.progress.time_ms}
                yield sse_data(out)
            continue
        if isinstance(step, ChatOutcome):
            outcomes.append(step)
            for frame in _finish_chunks(step, choice, o, body):
                yield frame
            continue
        choice.timings.token()
        delta = delta_json(step.delta)
        if o.legacy_functions:
            delta = function_call_delta(delta)
        if choice.text is not None and step.delta.content:
            choice.text.append(step.delta.content)
        if choice.logprobs is not None:
            yield chunk(step.index, delta or {"content": ""}, choice.logprobs.chunk(step.token))
        elif delta:
            yield chunk(step.index, delta)
    if o.include_usage and outcomes:
        first = outcomes[0].finish
        usage = usage_body(first.prompt_tokens, sum(c.finish.completion_tokens for c in outcomes), first.cached_tokens)
        usage["completion_tokens_details"] = completion_details(outcomes)
        yield sse_data(chunk_body(o.completion_id, o.created, o.model, [], usage))
    yield sse_data("[DONE]")


def _finish_chunks(step: ChatOutcome, choice: _Choice, o: StreamOptions, body: Callable[..., dict]) -> list[str]:
    frames: list[dict] = []
    delta = delta_json(step.tail, step.owed)
    reason = step.finish_reason
    if o.legacy_functions:
        delta, reason = function_call_delta(delta), legacy_finish(reason)
    if choice.text is not None and step.tail.content:
        choice.text.append(step.tail.content)
    if delta:
        frame = body(step.index, delta)
        if o.timings_per_token:
            frame["timings"] = choice.timings.to_dict()
        frames.append(frame)
    finish = body(step.index, {"reasoning_only": True} if step.reasoning_only else {}, reason)
    if step.finish.timings.draft_rounds or o.timings_per_token:
        finish["timings"] = step.finish.timings.to_dict()
    frames.append(finish)
    if o.verbose is not None:
        frames[0]["__verbose"] = o.verbose(step, "".join(choice.text))
    return [sse_data(frame) for frame in frames]
