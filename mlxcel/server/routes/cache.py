"""GET /v1/cache/stats and POST /v1/cache/reset: the host-RAM prompt cache. With many
models (--config) each resident model has its own: stats lists them by id, and reset
clears the one `{"model": id}` names, or every resident model's."""

from __future__ import annotations

from fastapi import APIRouter, Request

from mlxcel.engine.prompt_cache import HostPromptCache, disabled_stats
from mlxcel.http.errors import invalid_request
from mlxcel.http.json_body import read_optional_object

router = APIRouter()


def _caches(request: Request, model: str | None = None) -> dict[str, HostPromptCache | None]:
    fleet = request.app.state.fleet
    if fleet is None:
        host = request.app.state.host
        return {host.model_id: host.host_cache}
    if model is not None:
        model_id = fleet.entry(model).id
        resident = fleet.resident(model_id)
        return {model_id: resident.host.host_cache if resident is not None else None}
    return {r.id: r.host.host_cache for r in fleet.resident_list()}


def _reset(cache: HostPromptCache | None) -> dict:
    if cache is None:
        return {**disabled_stats(), "freed_entries": 0, "freed_bytes": 0}
    freed = cache.reset()
    return {**cache.stats(), "freed_entries": freed["entries"], "freed_bytes": freed["bytes"]}


@router.get("/v1/cache/stats")
async def cache_stats(request: Request):
    caches = _caches(request)
    if request.app.state.fleet is None:
        cache = next(iter(caches.values()))
        return cache.stats() if cache is not None else disabled_stats()
    models = {model_id: cache.stats() if cache is not None else disabled_stats() for model_id, cache in caches.items()}
    return {"enabled": any(s.get("enabled", True) for s in models.values()) if models else False, "models": models}


@router.post("/v1/cache/reset")
async def cache_reset(request: Request):
    """Clears every entry and reports what was freed; resetting again frees nothing."""
    model = (await read_optional_object(request)).get("model")
    if model is not None and not isinstance(model, str):
        raise invalid_request("`model` must be a string")
    caches = _caches(request, model or None)
    if request.app.state.fleet is None:
        return _reset(next(iter(caches.values())))
    return {"models": {model_id: _reset(cache) for model_id, cache in caches.items()}}
