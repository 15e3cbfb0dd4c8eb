"""Read-only routes: /health (and /, /v1/health), /v1/models (and /models), /props,
/slots. /v1/models and /props carry the spec's fields and llama-server's."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mlxcel import __version__
from mlxcel.api.rerank import listing as rerank_listing
from mlxcel.chat.media_parts import MEDIA_MARKER
from mlxcel.chat.template_caps import probe_caps
from mlxcel.fleet.errors import ModelNotLoaded
from mlxcel.http.errors import APIError, not_supported
from mlxcel.server.routes.fleet_listing import fleet_listing, max_context_at_width_1
from mlxcel.server.routes.readiness import readiness
from mlxcel.server.routes.residency import reread
from mlxcel.server.routes.slot_rows import slot_rows
from mlxcel.turn.embedding_host import EmbeddingHost
from mlxcel.turn.generation_settings import generation_settings
from mlxcel.turn.model_host import ModelHost
from mlxcel.turn.rerank_host import RerankHost

router = APIRouter()


def host_of(request: Request) -> ModelHost:
    """The model the info routes describe: the only one, or with many (--config) the
    one `?model=` names, else the default, when resident."""
    fleet = request.app.state.fleet
    if fleet is None:
        return request.app.state.host
    name = request.query_params.get("model")
    prefer = fleet.entry(name).id if name else None
    host = fleet.any_host(prefer)
    if host is None or (prefer is not None and host.model_id != prefer):
        model_id = prefer or fleet.config.default_model
        raise ModelNotLoaded(model_id, f"The model `{model_id}` is not loaded: this route describes a loaded model "
                                       "(a request to it, or POST /v1/keep, loads it)")
    return host


@router.get("/health")
@router.get("/v1/health")
@router.get("/")
async def health(request: Request):
    if request.query_params.get("ready") not in (None, "", "0", "false"):
        return readiness(request)
    if request.app.state.fleet is not None:  # 003: liveness only
        return JSONResponse({"status": "healthy", "pid": os.getpid()})
    host, embedding, reranker = host_of(request), _embedding_host(request), _rerank_host(request)
    served = request.app.state.served_worker
    for worker in (embedding, reranker):
        if worker is None:
            continue
        if worker.error is not None:
            return JSONResponse({"status": "error", "error": worker.error}, status_code=503)
        if worker.sleeping:  # one beside the chat model sleeps on its own: the server stays healthy
            if worker is served:
                return _asleep_health(worker)
            continue
        if not worker.ready:
            return JSONResponse({"status": "loading model"}, status_code=503)
    if served is not None:  # --embedding or --reranking: that model's health
        if served is embedding:
            return _embedding_health(embedding)
        return JSONResponse(rerank_listing.health(reranker), status_code=200 if reranker.engine.alive else 503)
    tts = getattr(request.app.state, "tts_host", None)  # the speech voice loads beside the chat model
    if tts is not None and tts.error is not None:
        return JSONResponse({"status": "error", "error": tts.error}, status_code=503)
    if host.failed:
        return JSONResponse({"status": "error", "error": host.error}, status_code=503)
    if host.sleeping:
        return _asleep_health(host, tool_call_parser=host.health_tool_call_parser)
    if not host.ready or (tts is not None and not tts.ready and not tts.sleeping):
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


def _asleep_health(sleeper: ModelHost | EmbeddingHost | RerankHost, **extra) -> JSONResponse:
    """--sleep-idle-seconds: a request wakes the model, so the sleeping server is healthy."""
    props = sleeper.asleep.get("props", {})
    return JSONResponse({"status": "ok", "model": sleeper.model_id, "is_sleeping": True,
                         "context_size": props.get("n_ctx_slot", props.get("n_ctx")), **extra})


def _rerank_host(request: Request) -> RerankHost | None:
    return getattr(request.app.state, "rerank", None)


def _embedding_host(request: Request) -> EmbeddingHost | None:
    return getattr(request.app.state, "embedding_host", None)


def _embedding_health(embedding: EmbeddingHost) -> JSONResponse:
    engine = embedding.engine
    if engine.failure is not None:
        return JSONResponse({"status": "error", "error": engine.failure}, status_code=503)
    return JSONResponse({"status": "ok", "model": embedding.model_id,
                         "batch": {"queue_depth": engine.queue_depth, "max_batch_size": embedding.runtime.n_seq_max},
                         "context_size": embedding.runtime.max_input_tokens})


def _embedding_entry(embedding: EmbeddingHost) -> dict:
    config = embedding.config
    aliases = list(config.aliases) if config.embedding_only else []
    entry = {"id": embedding.model_id, "aliases": aliases, "tags": [], "object": "model",
             "created": embedding.created, "owned_by": "user", "kind": "embedding"}
    if embedding.sleeping and "meta" in embedding.asleep:  # --sleep-idle-seconds: as before it slept
        entry["meta"] = embedding.asleep["meta"]
    elif embedding.ready:
        entry["meta"] = _embedding_meta(embedding)
    return entry


def _embedding_meta(embedding: EmbeddingHost) -> dict:
    runtime = embedding.runtime
    return {"n_ctx": runtime.max_input_tokens, "n_ctx_train": runtime.n_ctx_train, "n_embd": runtime.n_out,
            "pooling": runtime.pooling}


def _model_entry(host: ModelHost) -> dict:
    config = host.config
    entry = {"id": host.model_id, "aliases": list(config.aliases), "tags": list(config.tags), "object": "model",
             "created": host.created, "owned_by": "user", "kind": "chat"}
    if host.sleeping and "meta" in host.asleep:
        entry["meta"] = host.asleep["meta"]
    elif host.ready:
        entry["meta"] = model_meta(host)
    return entry


def model_meta(host: ModelHost) -> dict:
    """llama-server's `meta` of a loaded model's /v1/models row."""
    runtime = host.runtime
    return {
        "vocab_type": runtime.vocab_type(),
        "n_vocab": host.tokenizer.n_vocab,
        "n_ctx": host.slot_context,
        "n_ctx_train": runtime.n_ctx_train,
        "n_embd": runtime.n_embd(),
        "n_params": runtime.n_params(),
        "size": runtime.model_size(),
        "ftype": runtime.ftype_name(),
    }


def _markers(host: ModelHost, monitor) -> dict:
    """003's markers on the one model of a -m server: resident and pinned while loaded."""
    config = host.config
    return {"resident": host.ready, "pinned": True, "speculative": config.spec_type != "none",
            "vlm": config.mmproj is not None, "modalities": _modalities(host),
            "profile": None, "default": True,
            "context_length": host.slot_context if host.ready or host.sleeping else None,
            "max_context_at_width_1": max_context_at_width_1(monitor, host)}


def _capabilities(host: ModelHost) -> list[str]:
    """llama-server's capability names: completion, and multimodal with a projector."""
    modalities = host.modalities
    return ["completion", *(["multimodal"] if modalities["vision"] or modalities["audio"] else [])]


def _ollama_entry(host: ModelHost | EmbeddingHost, capability: str = "completion") -> dict:
    """llama-server's `models` list, in Ollama's shape with its placeholder values."""
    details = {"parent_model": "", "format": "gguf", "family": "", "families": [""], "parameter_size": "",
               "quantization_level": ""}
    return {"name": host.model_id, "model": host.model_id, "modified_at": "", "size": "", "digest": "",
            "type": "model", "description": "", "tags": [""], "parameters": "",
            "capabilities": _capabilities(host) if isinstance(host, ModelHost) else [capability],
            "details": details}


@router.get("/v1/models")
@router.get("/models")
async def list_models(request: Request):
    embedding = _embedding_host(request)
    fleet = request.app.state.fleet
    if fleet is not None and request.query_params.get("reload"):  # llama-server's router: read the list again
        await reread(fleet)
    await request.app.state.monitor.learn_served()  # what max_context_at_width_1 is built from
    if fleet is not None:
        # off the event loop: a header not read yet (a folder's new file) costs a vocabulary walk
        models, data = [], await asyncio.to_thread(fleet_listing, fleet, request.app.state.monitor)
    else:
        models, data = [], []
    host = request.app.state.host
    if host is not None and not host.absent:
        models.append(_ollama_entry(host))
        data.append({**_model_entry(host), **_markers(host, request.app.state.monitor)})
    if embedding is not None:
        models.append(_ollama_entry(embedding, "embedding"))
        data.append(_embedding_entry(embedding))
    reranker = _rerank_host(request)
    if reranker is not None:
        models.append(_ollama_entry(reranker, "rerank"))
        data.append(rerank_listing.model_entry(reranker))
    return {"models": models, "object": "list", "data": data}


def _template_caps(host: ModelHost) -> dict[str, bool]:
    if host.template_caps is None:
        host.template_caps = probe_caps(host.template) if host.template is not None else {}
    return host.template_caps


def _modalities(host: ModelHost) -> dict[str, bool]:
    """What the model takes besides text: a projector's images (and video, as frames), audio."""
    modalities = host.modalities
    return {"vision": modalities["vision"], "video": modalities["vision"], "audio": modalities["audio"]}


@router.get("/props")
async def props(request: Request):
    host, embedding, reranker = host_of(request), _embedding_host(request), _rerank_host(request)
    served = request.app.state.served_worker
    if served is not None:  # --embedding or --reranking: only that model's figures
        if served.sleeping and "props" in served.asleep:
            return {**served.asleep["props"], "is_sleeping": True}
        served.require_ready()
        if served is embedding:
            return _embedding_only_props(embedding)
        return rerank_listing.rerank_only_props(reranker, __version__)
    if host.sleeping and "props" in host.asleep:  # as read just before it slept (idle_sleep.py)
        return {**host.asleep["props"], **beside_props(embedding, reranker), "is_sleeping": True}
    host.require_ready()
    return chat_props(host, embedding, reranker)


def beside_props(embedding: EmbeddingHost | None, reranker: RerankHost | None) -> dict:
    """/props's entries of the models served beside the chat model, each asleep or awake on its own."""
    entries = {}
    if embedding is not None and (embedding.ready or embedding.sleeping):
        entries["embedding_model"] = _beside_entry(embedding, _embedding_props)
    if reranker is not None:
        entries["rerank"] = _beside_entry(reranker, rerank_listing.props_entry)
    return entries


def _beside_entry(worker: EmbeddingHost | RerankHost, awake: Callable[[Any], dict]) -> dict:
    if worker.sleeping and "props" in worker.asleep:  # as read just before it slept
        return {**worker.asleep["props"], "is_sleeping": True}
    return {**awake(worker), "is_sleeping": False}


def beside_asleep_answers(embedding: EmbeddingHost) -> dict:
    """What /props and /v1/models say of an embedding model beside the chat model while it sleeps."""
    return {"props": _embedding_props(embedding), "meta": _embedding_meta(embedding)}


def asleep_answers(host: ModelHost, embedding: EmbeddingHost | None, reranker: RerankHost | None) -> dict:
    """What /props, /v1/models and /metrics answer while the model sleeps (--sleep-idle-seconds):
    read from the loaded model just before it sleeps."""
    return {"props": chat_props(host, embedding, reranker), "meta": model_meta(host), "snapshot": host.engine.snapshot}


def embedding_asleep_answers(embedding: EmbeddingHost) -> dict:
    """The same for a server started with --embedding."""
    return {"props": _embedding_only_props(embedding), "meta": _embedding_meta(embedding)}


def _embedding_only_props(embedding: EmbeddingHost) -> dict:
    return {"model_alias": embedding.model_id, "model_path": str(embedding.model_path),
            "n_ctx": embedding.runtime.max_input_tokens, "total_slots": embedding.runtime.n_seq_max,
            "embedding_model": _embedding_props(embedding), "build_info": f"mlxcel {__version__}",
            "endpoint_slots": False, "endpoint_props": False, "endpoint_metrics": embedding.config.metrics,
            "is_sleeping": False, "modalities": {"vision": False, "video": False, "audio": False}}


def chat_props(host: ModelHost, embedding: EmbeddingHost | None, reranker: RerankHost | None) -> dict:
    """/props of a server whose chat model is loaded."""
    config = host.config
    settings = generation_settings(config.sampling, config.n_predict, config.default_stop, config.ignore_eos,
                                   banned_eog=host.tokenizer.eog_tokens, speculative=config.spec_type,
                                   reasoning_format=config.reasoning_format)
    template = host.template
    return {
        # the spec's flat fields, with llama-server's `params` and `n_ctx` beside them
        "default_generation_settings": {**settings, "params": settings, "n_ctx": host.slot_context},
        "total_slots": config.parallel,
        "model_alias": host.model_id,
        "model_ftype": host.runtime.ftype_name(),
        "model_path": str(host.model_path),
        "flash_attn": host.flash_attn,  # mlxcel: on, off, or auto (llama.cpp decided)
        "n_ctx": host.runtime.n_ctx,
        "n_ctx_slot": host.slot_context,
        "modalities": _modalities(host),
        "endpoint_slots": config.slots_endpoint,
        "endpoint_props": config.props_endpoint,
        "endpoint_metrics": config.metrics,
        "ui": config.webui,
        "chat_template": host.chat_template or "",
        "chat_template_caps": _template_caps(host),
        "bos_token": template.bos_token if template is not None else "",
        "eos_token": template.eos_token if template is not None else "",
        "build_info": f"mlxcel {__version__}",
        "is_sleeping": False,
        "cors_proxy_enabled": config.cors_proxy,
        "media_marker": MEDIA_MARKER,  # where /completion's multimodal_data goes in a prompt
        "ui_settings": config.ui_settings,
        **beside_props(embedding, reranker),
    }


def _embedding_props(embedding: EmbeddingHost) -> dict:
    """The embedding worker: its id, pooling, dimensions and longest input."""
    runtime = embedding.runtime
    return {"id": embedding.model_id, "kind": "embedding", "pooling": runtime.pooling, "n_embd": runtime.n_out,
            "n_ctx": runtime.max_input_tokens, "n_ubatch": runtime.n_ubatch, "n_seq_max": runtime.n_seq_max,
            "embd_normalize": embedding.config.embd_normalize, "n_decodes": embedding.engine.stats.decodes,
            "n_inputs": embedding.engine.stats.inputs_done}


@router.get("/slots")
async def slots(request: Request):
    host = host_of(request)
    if not host.config.slots_endpoint:
        raise not_supported("This server does not support the slots endpoint; start it with --slots")
    if host.absent:  # --embedding / --reranking: no model generates, so there are no generation slots
        return []
    host.require_ready()
    snapshot = host.engine.snapshot  # one picture for the slots and the queue
    if request.query_params.get("fail_on_no_slot") and snapshot.n_idle == 0:  # llama-server's probe
        raise APIError(503, "no slot available", "unavailable_error")

    return slot_rows(host, snapshot)
