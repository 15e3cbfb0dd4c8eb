"""003's residency routes: POST /unload, POST /v1/keep, POST /v1/reload. With one
model (-m) there is nothing to load or unload: /v1/reload answers `unsupported` as
003 says, the others name the flag that enables them."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request

from mlxcel.fleet.config_file import load_fleet_config
from mlxcel.fleet.errors import ConfigError
from mlxcel.fleet.models_dir import models_dir_fleet
from mlxcel.fleet.residency import Fleet
from mlxcel.http.errors import invalid_request, not_supported
from mlxcel.http.json_body import read_optional_object

router = APIRouter()


def _fleet(request: Request) -> Fleet:
    fleet = request.app.state.fleet
    if fleet is None:
        raise not_supported("this server serves one model (-m); residency needs --config FILE")
    return fleet


def _model_field(body: dict, required: bool) -> str | None:
    model = body.get("model")
    if model is None or model == "":
        if required:
            raise invalid_request("`model` is required")
        return None
    if not isinstance(model, str):
        raise invalid_request("`model` must be a string")
    return model  # an id, an alias, or either with @profile (Fleet.entry resolves it)


def _flag(body: dict, key: str, default: bool) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise invalid_request(f"`{key}` must be a boolean")
    return value


@router.post("/unload")
async def unload(request: Request):
    """The named model (409 while it streams; a pinned one stays pinned), or every idle model."""
    fleet = _fleet(request)
    model = _model_field(await read_optional_object(request), required=False)
    unloaded = await asyncio.to_thread(fleet.unload, model)
    return {"status": "ok", "unloaded": unloaded}


@router.post("/v1/keep")
async def keep(request: Request):
    """Keep a model resident past its idle timeout, or release it (`keep: false`). A model
    not resident starts loading; the answer waits for it to be warm (loaded, llama.cpp's
    warm-up run done) unless `warm` is false, which answers at once (`resident` false
    while it loads)."""
    fleet = _fleet(request)
    body = await read_optional_object(request)
    model = _model_field(body, required=True)
    keep_it, warm = _flag(body, "keep", True), _flag(body, "warm", True)
    resident = await asyncio.to_thread(fleet.keep, model, keep_it)
    if resident is not None and keep_it and warm:
        lease = await fleet.acquire(resident.entry)  # waits for the load
        lease.release()
    return {"status": "ok", "model": fleet.entry(model).id, "kept": keep_it,
            "resident": resident is not None and resident.ready}


@router.post("/v1/reload")
async def reload(request: Request):
    """Re-read the config file: entries whose load keys are unchanged stay loaded."""
    fleet = request.app.state.fleet
    if fleet is None:
        return {"status": "unsupported"}
    return await reread(fleet)


async def reread(fleet: Fleet) -> dict:
    """The fleet's models read again from where they came from (a file, a folder)."""
    try:
        current = fleet.config
        if current.reread is not None:  # --models-preset: the file read again (and the folder scanned)
            config = await asyncio.to_thread(current.reread)
        elif current.from_models_dir:  # the folder, scanned again
            config = await asyncio.to_thread(models_dir_fleet, current.path, current.max_models or 0, current.autoload)
        else:
            config = await asyncio.to_thread(load_fleet_config, current.path)
    except ConfigError as exc:
        raise invalid_request(f"the config was not reloaded: {exc}", code="invalid_config") from None
    return await asyncio.to_thread(fleet.reload, config)
