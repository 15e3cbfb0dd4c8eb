"""llama-server's administrative routes whose features mlxcel does not have, answered
as llama-server answers them when those features are off: slot save / restore / erase
(llama-server's --slot-save-path), changing global properties (its --props) and LoRA
adapters (none can be loaded: --lora is refused at start)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from mlxcel.http.errors import invalid_request, not_supported
from mlxcel.http.json_body import read_small_json

router = APIRouter()


@router.post("/slots/{id_slot}")
async def slot_action(id_slot: str):
    raise not_supported("This server does not support slots action (llama-server's --slot-save-path is not "
                        "implemented)")


@router.post("/props")
async def change_props():
    raise not_supported("This server does not support changing global properties (llama-server's --props is not "
                        "implemented)")


@router.get("/lora-adapters")
async def lora_adapters() -> list:
    return []  # no adapter is loaded


@router.post("/lora-adapters")
async def set_lora_adapters(request: Request) -> list:
    body = await read_small_json(request)
    if not isinstance(body, list):
        raise invalid_request("expected a list of {id, scale} objects")
    if body:
        raise invalid_request("invalid adapter id: no LoRA adapter is loaded")
    return []
