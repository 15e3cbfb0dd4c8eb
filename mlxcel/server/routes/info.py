"""Read-only routes: /health (and /), /v1/models, /props, /slots."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mlxcel import __version__
from mlxcel.http.errors import not_supported
from mlxcel.turn.generation_settings import generation_settings
from mlxcel.turn.model_host import ModelHost

router = APIRouter()


def _host(request: Request) -> ModelHost:
    return request.app.state.host


@router.get("/health")
@router.get("/")
async def health(request: Request):
    host = _host(request)
    if host.failed:
        return JSONResponse({"status": "error", "error": host.error}, status_code=503)
    if not host.ready:
        return JSONResponse({"status": "loading model"}, status_code=503)
    snapshot = host.engine.snapshot
    stats = snapshot.stats
    busy = snapshot.n_busy
    has_free_slot = snapshot.n_idle > 0
    body = {
        "status": "ok" if has_free_slot else "no slot available",
        "model": host.model_id,
        "batch": {
            "active_sequences": busy,
            "queue_depth": snapshot.queue_depth,
            "max_batch_size": len(snapshot.slots),
        },
        "observability": {
            "sequences_started": stats.sequences_started,
            "sequences_completed": stats.sequences_completed,
            "total_prefill_tokens": stats.prefill_tokens,
            "total_decode_tokens": stats.decode_tokens,
            "decode_steps_processed": stats.decode_steps,
            "prefill_chunks_processed": stats.prefill_chunks,
            "current_batch_size": busy,
            "cache_pool_active": snapshot.n_cached_slots,
        },
        "context_size": host.slot_context,
        "tool_call_parser": host.health_tool_call_parser,
    }
    return JSONResponse(body, status_code=200 if has_free_slot else 503)


@router.get("/v1/models")
@router.get("/models")
async def list_models(request: Request):
    host = _host(request)
    entry = {"id": host.model_id, "object": "model", "created": host.created, "owned_by": "user"}
    if host.ready:
        runtime = host.runtime
        entry["meta"] = {
            "n_vocab": host.tokenizer.n_vocab,
            "n_ctx_train": runtime.n_ctx_train,
            "n_ctx": runtime.n_ctx,
            "n_params": runtime.n_params(),
            "size": runtime.model_size(),
        }
    return {"object": "list", "data": [entry]}


@router.get("/props")
async def props(request: Request):
    host = _host(request)
    host.require_ready()
    config = host.config
    return {
        "default_generation_settings": generation_settings(config.sampling, config.n_predict),
        "total_slots": config.parallel,
        "model_alias": host.model_id,
        "model_path": str(host.model_path),
        "n_ctx": host.runtime.n_ctx,
        "n_ctx_slot": host.slot_context,
        "chat_template": host.chat_template or "",
        "modalities": {"vision": False, "audio": False},
        "build_info": f"mlxcel {__version__}",
    }


@router.get("/slots")
async def slots(request: Request):
    host = _host(request)
    if not host.config.slots_endpoint:
        raise not_supported("This server does not support the slots endpoint; start it with --slots")
    host.require_ready()
    rows = []
    for slot in host.engine.snapshot.slots:
        rows.append(
            {
                "id": slot.id,
                "state": slot.state.value,
                "model": host.model_id,
                "context_size": host.slot_context,
                "is_processing": slot.busy,
                "n_ctx": host.slot_context,
                "id_task": slot.request_id,
                "n_prompt_tokens": slot.n_prompt_tokens,
                "n_decoded": slot.n_decoded,
                "n_cached": slot.n_cached,
            }
        )
    return rows
