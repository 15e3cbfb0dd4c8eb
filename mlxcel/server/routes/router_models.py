"""llama-server's router routes, for a server of many models (--models-dir,
--models-preset, --config): POST /models/load and /models/unload, GET /models/sse (each
model's status as it changes, mlxcel/fleet/events.py), and the download routes it has
(POST /models, DELETE /models), which mlxcel answers as not supported: a request never
names what to download. With one model (-m) every one of them says which flags enable it."""

from __future__ import annotations

import asyncio
import json

from fastapi import APIRouter, Request

from mlxcel.fleet.errors import ModelNotFound
from mlxcel.fleet.residency import Fleet
from mlxcel.http.errors import APIError, invalid_request, not_supported
from mlxcel.http.json_body import read_json_object
from mlxcel.http.sse import EventStreamResponse, keepalive_seconds

router = APIRouter()


def _fleet(request: Request) -> Fleet:
    fleet = request.app.state.fleet
    if fleet is None:
        raise not_supported("this server serves one model (-m); loading and unloading models needs "
                            "--models-dir, --models-preset or --config")
    return fleet


async def _model_id(request: Request, fleet: Fleet, unknown: APIError) -> str:
    body = await read_json_object(request, max_bytes=64 * 1024)  # an object, its strings valid Unicode
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise invalid_request("`model` must be a non-empty string")
    try:
        return fleet.entry(name).id
    except ModelNotFound:
        raise unknown from None


@router.post("/models/load")
async def load(request: Request) -> dict:
    """Start loading the model (llama-server answers once the load has started)."""
    fleet = _fleet(request)
    model_id = await _model_id(request, fleet, APIError(404, "model is not found", "not_found_error"))
    if fleet.status(model_id) != "unloaded":
        raise invalid_request("model is already running")
    await asyncio.to_thread(fleet.load, model_id)
    return {"success": True}


@router.post("/models/unload")
async def unload(request: Request) -> dict:
    """Unload the model (409 while it serves a request: wait for it, as /unload does)."""
    fleet = _fleet(request)
    model_id = await _model_id(request, fleet, invalid_request("model is not found"))
    if fleet.status(model_id) == "unloaded":
        raise invalid_request("model is not running")
    await asyncio.to_thread(fleet.unload, model_id)
    return {"success": True}


@router.get("/models/sse")
async def status_events(request: Request) -> EventStreamResponse:
    fleet = _fleet(request)
    listener = fleet.events.subscribe()

    async def events():
        while (event := await listener.next()) is not None:
            yield f"data: {json.dumps(event)}\n\n"

    return EventStreamResponse(events(), on_close=listener.close,
                               ping_seconds=keepalive_seconds(request.app.state.config.sse_ping_interval))


@router.post("/models")
@router.delete("/models")
async def download(request: Request):
    _fleet(request)
    raise not_supported("a request cannot download or remove models here: `mlxcel pull NAME` fetches a catalog "
                        "model, and a GGUF put in --models-dir (or named in the presets) is served after "
                        "GET /models?reload=1")
