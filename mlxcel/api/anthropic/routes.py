"""POST /v1/messages and /v1/messages/count_tokens (and the same without /v1): the
Anthropic Messages API on a chat turn. Failures on these paths are rendered in
Anthropic's error shape by the global handlers (errors.render_error)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from mlxcel.api.anthropic.stream import MessageStream
from mlxcel.api.anthropic.translate import content_blocks, stop_reason, turn_spec
from mlxcel.api.anthropic.wire import CountTokensRequest, MessagesRequest, message_body, usage_body
from mlxcel.engine.request import FinishReason
from mlxcel.http.errors import as_api_error
from mlxcel.http.opening import Opened, opening
from mlxcel.http.request_context import cancel_on_disconnect, run_while_connected
from mlxcel.http.sse import EventStreamResponse, Keepalive, keepalive_seconds
from mlxcel.turn.chat_turn import ChatOutcome, ChatTurn, RenderedTurn
from mlxcel.turn.errors import generation_error

router = APIRouter()
log = logging.getLogger("mlxcel.anthropic")

PING_INTERVAL_S = 5.0  # a ping event whenever no other event came for this long
# fields a request may carry that change nothing here (named in one warning line)
IGNORED_FIELDS = {"metadata", "container", "service_tier", "stop", "mcp_servers", "context_management",
                  "inference_geo", "user"}
HONORED_FIELDS = set(MessagesRequest.model_fields) - IGNORED_FIELDS | {"extra_body", "cache_prompt"}
MESSAGES = opening(MessagesRequest, "msg_", HONORED_FIELDS, IGNORED_FIELDS, api="anthropic")
COUNT_TOKENS = opening(CountTokensRequest, "count_", api="anthropic")


@router.post("/v1/messages")
@router.post("/messages")
async def create_message(request: Request, opened: Opened[MessagesRequest] = Depends(MESSAGES)):
    host, data, body, message_id = opened.host, opened.data, opened.body, opened.id
    spec = await asyncio.to_thread(turn_spec, data, body, host.config.chat_template_kwargs,
                                   host.config.prefill_assistant)
    turn = await run_while_connected(request, ChatTurn.start(host, spec, opened.context))  # media: its load too
    if body.stream:
        return EventStreamResponse(
            _stream(turn, MessageStream(message_id, host.model_id, turn.prompt_tokens)), on_close=turn.cancel,
            ping_seconds=keepalive_seconds(host.config.sse_ping_interval),
            keepalives=(Keepalive(PING_INTERVAL_S, MessageStream.ping().encode(), after_first_chunk=True),),
            resumable=True,
        )
    async with cancel_on_disconnect(request, turn.cancel):
        outcome = await turn.run()
    reason, sequence = stop_reason(outcome)
    finish = outcome.finish
    usage = usage_body(finish.prompt_tokens, finish.completion_tokens, finish.cached_tokens)
    return JSONResponse(message_body(message_id, host.model_id, content_blocks(outcome.final), reason, sequence,
                                     usage))


@router.post("/v1/messages/count_tokens")
@router.post("/messages/count_tokens")
async def count_tokens(opened: Opened[CountTokensRequest] = Depends(COUNT_TOKENS)):
    host, data, body = opened.host, opened.data, opened.body

    spec = await asyncio.to_thread(turn_spec, data, body, host.config.chat_template_kwargs,
                                   host.config.prefill_assistant)
    rendered = await RenderedTurn.prepare(host, spec)
    return JSONResponse({"input_tokens": rendered.prompt_tokens})


async def _stream(turn: ChatTurn, writer: MessageStream) -> AsyncIterator[str]:
    for event in writer.start():
        yield event
    try:
        async with contextlib.aclosing(turn.stream()) as steps:
            async for step in steps:
                if not isinstance(step, ChatOutcome):
                    events = writer.feed(step.delta)
                elif step.finish.reason is FinishReason.ERROR:
                    events = [writer.error(as_api_error(generation_error(step.finish)))]
                else:
                    events = writer.finish(step)
                for event in events:
                    yield event
    except Exception as exc:  # noqa: BLE001 - the stream has begun: the failure is its last event
        log.exception("request %s: the stream failed", writer.message_id)
        yield writer.error(as_api_error(exc))
