"""Read-only routes: /health (and /, /v1/health), /v1/models (and /models), /props,
/slots. /v1/models and /props carry the spec's fields and llama-server's."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mlxcel import __version__
from mlxcel.api.rerank import listing as rerank_listing
from mlxcel.chat.template_caps import probe_caps
from mlxcel.http.errors import not_supported
from mlxcel.turn.generation_settings import generation_settings
from mlxcel.turn.model_host import ModelHost

router = APIRouter()


def _host(request: Request) -> ModelHost:
    return request.app.state.host


@router.get("/health")
@router.get("/v1/health")
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


def _model_entry(host: ModelHost) -> dict:
    config = host.config
    entry = {"id": host.model_id, "aliases": list(config.aliases), "tags": list(config.tags), "object": "model",
             "created": host.created, "owned_by": "user"}
    if host.ready:
        runtime = host.runtime
        entry["meta"] = {
            "vocab_type": runtime.vocab_type(),
            "n_vocab": host.tokenizer.n_vocab,
            "n_ctx": host.slot_context,
            "n_ctx_train": runtime.n_ctx_train,
            "n_embd": runtime.n_embd(),
            "n_params": runtime.n_params(),
            "size": runtime.model_size(),
            "ftype": runtime.ftype_name(),
        }
    return entry


def _ollama_entry(host: ModelHost) -> dict:
    """llama-server's `models` list, in Ollama's shape with its placeholder values."""
    details = {"parent_model": "", "format": "gguf", "family": "", "families": [""], "parameter_size": "",
               "quantization_level": ""}
    return {"name": host.model_id, "model": host.model_id, "modified_at": "", "size": "", "digest": "",
            "type": "model", "description": "", "tags": [""], "capabilities": ["completion"], "parameters": "",
            "details": details}


@router.get("/v1/models")
@router.get("/models")
async def list_models(request: Request):
    host = _host(request)
    answer = {"models": [_ollama_entry(host)], "object": "list", "data": [_model_entry(host)]}
    reranker = getattr(request.app.state, "rerank", None)
    if reranker is not None:
        answer["data"].append(rerank_listing.model_entry(reranker))
    return answer


def _template_caps(request: Request, host: ModelHost) -> dict[str, bool]:
    caps = getattr(request.app.state, "template_caps", None)
    if caps is None:
        caps = request.app.state.template_caps = probe_caps(host.template) if host.template is not None else {}
    return caps


# llama-server draws its media marker at start so no prompt text can forge it
MEDIA_MARKER = f"<__media_{secrets.token_urlsafe(24).replace('-', 'a').replace('_', 'b')}__>"


@router.get("/props")
async def props(request: Request):
    host = _host(request)
    host.require_ready()
    reranker = getattr(request.app.state, "rerank", None)
    config = host.config
    settings = generation_settings(config.sampling, config.n_predict, config.default_stop, config.ignore_eos,
                                   banned_eog=host.tokenizer.eog_tokens, speculative=config.spec_type)
    template = host.template
    return {
        # the spec's flat fields, with llama-server's `params` and `n_ctx` beside them
        "default_generation_settings": {**settings, "params": settings, "n_ctx": host.slot_context},
        "total_slots": config.parallel,
        "model_alias": host.model_id,
        "model_ftype": host.runtime.ftype_name(),
        "model_path": str(host.model_path),
        "n_ctx": host.runtime.n_ctx,
        "n_ctx_slot": host.slot_context,
        "modalities": {"vision": False, "video": False, "audio": False},
        "endpoint_slots": config.slots_endpoint,
        "endpoint_props": False,  # POST /props is not served
        "endpoint_metrics": config.metrics,
        "ui": False,
        "chat_template": host.chat_template or "",
        "chat_template_caps": _template_caps(request, host),
        "bos_token": template.bos_token if template is not None else "",
        "eos_token": template.eos_token if template is not None else "",
        "build_info": f"mlxcel {__version__}",
        "is_sleeping": False,
        "cors_proxy_enabled": False,
        "media_marker": MEDIA_MARKER,  # where media would go in a prompt (none is accepted yet)
        "ui_settings": {},
        **({"rerank": rerank_listing.props_entry(reranker)} if reranker is not None else {}),
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
