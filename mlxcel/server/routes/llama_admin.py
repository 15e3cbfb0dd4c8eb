"""llama-server's administrative routes: slot save / restore / erase (with its
--slot-save-path), POST /props (its --props, which changes nothing), and the LoRA
adapters' scales (--lora, --lora-scaled)."""

from __future__ import annotations

import asyncio
import os

from fastapi import APIRouter, Request

from mlxcel.engine.engine_control import EngineStoppedError
from mlxcel.engine.lora import LoraError, requested_scales
from mlxcel.engine.slot_files import SlotAction, SlotFileError, valid_filename
from mlxcel.http.errors import invalid_request, not_supported, server_busy, server_error
from mlxcel.http.json_body import read_small_json
from mlxcel.server.routes.info import host_of

router = APIRouter()


@router.post("/slots/{id_slot}")
async def slot_action(id_slot: str, request: Request) -> dict:
    """`?action=save|restore` with `{"filename": NAME}` (a file in --slot-save-path), or
    `?action=erase`; on a busy slot the action waits for its request to end."""
    host = host_of(request)
    folder = host.config.slot_save_path
    if folder is None:
        raise not_supported("This server does not support slots action. Start it with `--slot-save-path`")
    try:
        slot_id = int(id_slot) if id_slot.isascii() else None  # int() reads other scripts' digits too
    except ValueError:
        slot_id = None
    if slot_id is None:
        raise invalid_request("Invalid slot ID")
    if host.absent:
        raise invalid_request("Invalid slot ID: this server has no generation slots (--embedding / --reranking)")
    kind = request.query_params.get("action", "")
    if kind not in ("save", "restore", "erase"):
        raise invalid_request("Invalid action")
    filename = ""
    if kind != "erase":
        body = await read_small_json(request)
        filename = body.get("filename") if isinstance(body, dict) else None
        if not isinstance(filename, str):
            raise invalid_request("the body must be a JSON object with a string `filename`")
        if not valid_filename(filename):
            raise invalid_request("Invalid filename")
    host.require_ready()
    action = SlotAction(kind, slot_id, os.path.join(folder, filename) if filename else "")
    try:
        result = await asyncio.wrap_future(host.engine.slot_action(action))
    except SlotFileError as exc:
        if exc.busy:  # no room now (the spec's 503 for a full queue): the client retries
            raise server_busy(str(exc)) from None
        raise (invalid_request(str(exc)) if exc.client_error else server_error(str(exc))) from None
    if kind == "erase":
        return {"id_slot": slot_id, "n_erased": result.n_tokens}
    if kind == "save":
        return {"id_slot": slot_id, "filename": filename, "n_saved": result.n_tokens, "n_written": result.n_bytes,
                "timings": {"save_ms": result.ms}}
    return {"id_slot": slot_id, "filename": filename, "n_restored": result.n_tokens, "n_read": result.n_bytes,
            "timings": {"restore_ms": result.ms}}


@router.post("/props")
async def change_props(request: Request) -> dict:
    """llama-server's --props: the route is open, and as there it changes nothing."""
    if not host_of(request).config.props_endpoint:
        raise not_supported("This server does not support changing global properties. Start it with `--props`")
    body = await read_small_json(request)
    if not isinstance(body, dict):
        raise invalid_request("the body must be a JSON object of properties")
    return {"success": True}


@router.get("/lora-adapters")
async def lora_adapters(request: Request) -> list:
    """The adapters --lora / --lora-scaled loaded, with the scales they run with."""
    return [{"id": i, "path": a.path, "scale": a.scale, "task_name": a.task_name, "prompt_prefix": a.prompt_prefix}
            for i, a in enumerate(host_of(request).adapters())]


@router.post("/lora-adapters")
async def set_lora_adapters(request: Request) -> dict:
    """`[{id, scale}]`: listed adapters get their scale, the others 0: the server's
    scales for the requests that name none, from the next one admitted. Requests
    running keep theirs; cached prefixes stay, each kept with the scales it was
    computed under."""
    host = host_of(request)
    body = await read_small_json(request)
    if not isinstance(body, list):
        raise invalid_request("expected a list of {id, scale} objects")
    try:
        scales = requested_scales(host.adapters(), body)
    except LoraError as exc:
        raise invalid_request(str(exc)) from None
    if host.absent:  # no model generates: an empty list was all it could ask
        return {"success": True}
    try:
        await asyncio.wrap_future(host.engine.set_lora_scales(scales))
    except (EngineStoppedError, ValueError) as exc:  # the server stops
        raise server_error(str(exc)) from None
    return {"success": True}
