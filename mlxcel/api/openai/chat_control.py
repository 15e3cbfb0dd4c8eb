"""llama-server's POST /v1/chat/completions/control: acts on a chat completion while it
streams, named by the `id` its chunks carry. The one action is `reasoning_end`: the
reasoning block ends now (its close marker forced, as when a thinking budget runs out)
and the model goes on to the answer; the completion must have asked for it with
`reasoning_control: true`. The answer is `{"success": bool}`, with a `message` when
nothing was done; a finished or unknown id matches nothing."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from mlxcel.http.errors import invalid_request
from mlxcel.http.json_body import read_json_object
from mlxcel.turn.live_completions import LiveCompletions

router = APIRouter()
ANSWER_TIMEOUT_S = 5.0  # the engine answers between two steps


def live_completions(request: Request) -> LiveCompletions:
    return request.app.state.live_completions


@router.post("/v1/chat/completions/control")
async def control(request: Request) -> dict:
    body = await read_json_object(request, max_bytes=64 * 1024)
    completion_id, action = body.get("id"), body.get("action")
    if not isinstance(completion_id, str) or not completion_id:
        raise invalid_request("missing completion id")
    if action != "reasoning_end":
        raise invalid_request("unknown control action")
    live = live_completions(request).get(completion_id)
    if live is None:
        return {"success": False, "message": "no active completion for this id"}
    if not live.reasoning_control:
        return {"success": False, "message": "reasoning control not enabled for this completion"}
    answers = [asyncio.wrap_future(live.engine.end_reasoning(request_id)) for request_id in live.request_ids]
    await asyncio.wait_for(asyncio.gather(*answers), ANSWER_TIMEOUT_S)
    return {"success": True}  # as llama-server: done whether or not the reasoning was still open
