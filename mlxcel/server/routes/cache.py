"""GET /v1/cache/stats and POST /v1/cache/reset: the host-RAM prompt cache."""

from __future__ import annotations

from fastapi import APIRouter, Request

from mlxcel.engine.prompt_cache import disabled_stats

router = APIRouter()


@router.get("/v1/cache/stats")
async def cache_stats(request: Request):
    cache = request.app.state.host.host_cache
    return cache.stats() if cache is not None else disabled_stats()


@router.post("/v1/cache/reset")
async def cache_reset(request: Request):
    """Clears every entry and reports what was freed; resetting again frees nothing."""
    cache = request.app.state.host.host_cache
    if cache is None:
        return {**disabled_stats(), "freed_entries": 0, "freed_bytes": 0}
    freed = cache.reset()
    return {**cache.stats(), "freed_entries": freed["entries"], "freed_bytes": freed["bytes"]}
