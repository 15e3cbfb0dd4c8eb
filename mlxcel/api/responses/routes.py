"""The OpenAI Responses API: POST /v1/responses (whole, streamed or background),
GET / DELETE /v1/responses/{id}, POST /v1/responses/{id}/cancel,
POST /v1/responses/compact and POST /v1/responses/input_tokens; each also without /v1.

Work that grows with the history (parsing, validation, translation, rendering,
tokenizing, compaction planning) and every call of the state store (a Redis that is slow
answers in seconds) run on worker threads; stored objects are looked up for the
API key the request came with (`request_key_id`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from mlxcel.api.responses.background import run_job
from mlxcel.api.responses.compaction import Compactor
from mlxcel.api.responses.events import sse_event
from mlxcel.api.responses.input_items import as_items
from mlxcel.api.responses.json_safe import is_json_safe
from mlxcel.api.responses.records import not_found
from mlxcel.api.responses.response_run import ResponseRun
from mlxcel.api.responses.state import ResponsesState
from mlxcel.api.responses.store_calls import in_store_thread
from mlxcel.api.responses.translate import check_request, turn_spec
from mlxcel.api.responses.wire import COMPACT_MAX_OUTPUT_TOKENS, CompactRequest, ResponsesRequest, usage_body
from mlxcel.chat.errors import ChatInputError
from mlxcel.http.auth import request_key_id
from mlxcel.http.errors import invalid_request, server_busy
from mlxcel.http.opening import Opened, opening
from mlxcel.http.request_context import cancel_on_disconnect
from mlxcel.http.sse import EventStreamResponse, keepalive_seconds
from mlxcel.turn.chat_turn import RenderedTurn, count_prompt_tokens
from mlxcel.turn.structured_output import compile_response_format

router = APIRouter()
HONORED_FIELDS = set(ResponsesRequest.model_fields) | {"extra_body", "response_format"}  # chat's shape of text.format
# the edge checks `input` against --max-messages, like every API's messages
CREATE = opening(ResponsesRequest, "resp_", HONORED_FIELDS, api="responses")
COUNT = opening(ResponsesRequest, "resp_", api="responses")
COMPACT = opening(CompactRequest, "resp_", api="responses")
CANCEL_SETTLE_S = 5.0  # how long a cancel waits for the response it stops to be recorded


def _state(request: Request) -> ResponsesState:
    return request.app.state.responses


def _owner(request: Request) -> str | None:
    return request_key_id(request.scope)


@router.post("/v1/responses")
@router.post("/responses")
async def create_response(request: Request, opened: Opened[ResponsesRequest] = Depends(CREATE)):
    host, data, body = opened.host, opened.data, opened.body
    state = _state(request)
    run = ResponseRun(state, host, data, body, opened.context)
    if body.background:
        return await _create_background(run)
    await run.translate()
    async with cancel_on_disconnect(request, run.cancel):  # a compaction summary may run here
        await run.ready()
    run.turn.submit()
    if body.stream:
        return EventStreamResponse(_stream(run), on_close=run.turn.cancel,
                                   ping_seconds=keepalive_seconds(host.config.sse_ping_interval), resumable=True)
    state.running[run.id] = run
    try:
        async with cancel_on_disconnect(request, run.cancel):
            async for _ in run.events():
                pass
    finally:
        state.running.pop(run.id, None)
    if run.final["status"] == "failed":
        raise run.failure_error()
    return JSONResponse(run.final)


async def _stream(run: ResponseRun) -> AsyncIterator[str]:
    run.state.running[run.id] = run
    try:
        async for event in run.events():
            yield sse_event(event)
    finally:
        run.state.running.pop(run.id, None)


async def _create_background(run: ResponseRun):
    state, body, host = run.state, run.body, run.host
    if body.stream:
        raise invalid_request("background responses cannot be streamed: poll GET /v1/responses/{id} instead")
    if not state.background_enabled:
        raise invalid_request("background mode is disabled (a response store, its byte budget and "
                              "--responses-background-max-jobs must all be above 0)", code="background_disabled")
    await run.translate()
    if run.policy is None:
        await run.ready()
    else:  # compaction happens in the job; the schema is checked now
        await compile_response_format(host.tokenizer, run.spec.response_format)
    if not host.engine.has_room:
        raise server_busy()
    job = state.jobs.admit(run.id, run.size, run.snapshot("queued"), run.owner)
    state.running[run.id] = run
    job.on_final.append(lambda _job: state.running.pop(run.id, None))
    body, written = job.body, state.jobs.announce(job)
    state.jobs.start(job, run_job(run, job))  # before waiting: a client gone meanwhile leaves a job that runs
    if written is not None:
        await asyncio.wrap_future(written)
    return JSONResponse(body)


@router.get("/v1/responses/{response_id}")
@router.get("/responses/{response_id}")
async def get_response(response_id: str, request: Request):
    state, owner = _state(request), _owner(request)
    state.records.require_storing()
    job = await in_store_thread(state.job, response_id, owner)
    if job is not None:
        return JSONResponse(job.body)
    if (run := state.unfinished(response_id, owner)) is not None:
        return JSONResponse(run.snapshot("in_progress"))
    record = await in_store_thread(state.records.find, response_id, owner)  # decodes its history too
    if record is None:
        raise not_found(response_id)
    return JSONResponse(record.body)


@router.delete("/v1/responses/{response_id}")
@router.delete("/responses/{response_id}")
async def delete_response(response_id: str, request: Request):
    state, owner = _state(request), _owner(request)
    state.records.require_storing()
    job = await in_store_thread(state.job, response_id, owner)
    if job is not None:
        raise invalid_request(f"response '{response_id}' has not finished (status: {job.status.value}): "
                              "cancel it before deleting it")
    if state.unfinished(response_id, owner) is not None:
        raise invalid_request(f"response '{response_id}' has not finished (status: in_progress): "
                              "cancel it before deleting it")
    if not await in_store_thread(state.records.drop, response_id, owner):
        raise not_found(response_id)
    return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})


@router.post("/v1/responses/{response_id}/cancel")
@router.post("/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request):
    state, owner = _state(request), _owner(request)
    state.records.require_storing()
    run = state.run(response_id, owner)
    job = await in_store_thread(state.job, response_id, owner)
    if run is not None and job is not None:
        await state.cancel_local(response_id)
        return JSONResponse(job.body)
    if run is not None and run.turn is not None:
        run.turn.cancel()  # its request then ends as cancelled, and is recorded so:
        try:  # answer with that record (the output so far, completed_at), as GET will show it
            await asyncio.wait_for(run.finished.wait(), CANCEL_SETTLE_S)
        except asyncio.TimeoutError:  # a stream its client does not read: what is known now
            return JSONResponse(run.snapshot("cancelled"))
        return JSONResponse(run.final)
    if job is not None:  # a background job another server sharing the store runs
        record = await state.cancel_elsewhere(response_id, owner)
    else:
        record = await in_store_thread(state.records.find, response_id, owner)
    if record is None:
        raise not_found(response_id)
    status = record.body["status"]
    if status != "cancelled":
        raise invalid_request(f"response '{response_id}' cannot be cancelled: it has finished (status: {status})")
    return JSONResponse(record.body)


@router.post("/v1/responses/input_tokens")
@router.post("/responses/input_tokens")
async def count_input_tokens(request: Request, opened: Opened[ResponsesRequest] = Depends(COUNT)):
    host, data, body = opened.host, opened.data, opened.body
    run = ResponseRun(_state(request), host, data, body, opened.context)
    await run.translate()
    tokens = (await RenderedTurn.prepare(host, run.spec)).prompt_tokens
    return JSONResponse({"object": "response.input_tokens", "input_tokens": tokens})


@router.post("/v1/responses/compact")
@router.post("/responses/compact")
async def compact(request: Request, opened: Opened[CompactRequest] = Depends(COMPACT)):
    host, data, body = opened.host, opened.data, opened.body
    if body.stream:
        raise invalid_request("compact does not stream")
    if body.previous_response_id or body.conversation:
        raise invalid_request("compact takes the whole history in 'input': previous_response_id and conversation "
                              "are not accepted")
    if body.keep_tokens is not None and body.keep_tokens <= 0:
        raise invalid_request("keep_tokens must be above 0")
    if body.max_output_tokens is not None and not 1 <= body.max_output_tokens <= COMPACT_MAX_OUTPUT_TOKENS:
        raise invalid_request(f"max_output_tokens must be between 1 and {COMPACT_MAX_OUTPUT_TOKENS}")
    response_id = opened.id

    def prepare() -> tuple[list[dict], dict]:
        check_request(body)
        items = as_items(body.input)
        if not items:
            raise ChatInputError("input is empty: compact takes the history to compact")
        if not is_json_safe(items):  # the output echoes the kept items
            raise ChatInputError("input holds text that is not valid Unicode (a lone surrogate?) or a non-finite "
                                 "number")
        return items, turn_spec(data, body, items, host.config.chat_template_kwargs).template_kwargs

    def count(history: list[dict]) -> int:  # runs on a worker thread
        return count_prompt_tokens(host, turn_spec(data, body, history, host.config.chat_template_kwargs))

    items, template_kwargs = await asyncio.to_thread(prepare)
    compactor = Compactor(host, body, template_kwargs, count, opened.context)
    async with cancel_on_disconnect(request, compactor.cancel):
        result = await compactor.compact(items, body.keep_tokens, body.max_output_tokens)
    return JSONResponse({
        "id": response_id,
        "object": "response.compaction",
        "created_at": int(time.time()),
        "model": host.model_id,
        "output": result.items,
        "usage": usage_body(result.summary_input_tokens, result.summary_output_tokens),
    })
