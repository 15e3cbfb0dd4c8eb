"""POST /v1/estimate and "dry_run": true on chat: an admission estimate for a chat
body, 003's fields (mlxcel.fleet.estimate), from the figures the monitor measures.
It never loads a model: a model that is not resident answers `resident: false`, its
prompt counted at four characters a token (`prompt_tokens_estimated: true`)."""

from __future__ import annotations

import asyncio
import math

from fastapi import APIRouter, Request

from mlxcel.api.openai.chat_wire import ChatCompletionRequest
from mlxcel.chat.media_parts import MEDIA_MARKER
from mlxcel.engine.rates import rates_of
from mlxcel.fleet.addressing import address
from mlxcel.fleet.estimate import estimate, queue_wait_s, warm_prefix
from mlxcel.fleet.footprint import estimate_footprint
from mlxcel.fleet.model_files import family_of
from mlxcel.fleet.monitor import read_memory
from mlxcel.fleet.profile_apply import apply_defaults
from mlxcel.http.errors import invalid_request
from mlxcel.http.json_body import read_json_object, validate
from mlxcel.turn.chat_turn import RenderedTurn
from mlxcel.turn.model_host import ModelHost

router = APIRouter()
CHARS_PER_TOKEN = 4


def _text_chars(value) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_text_chars(v) for v in value)
    if isinstance(value, dict):
        return sum(_text_chars(v) for k, v in value.items() if k in ("content", "text", "arguments"))
    return 0


def _free_bytes(monitor) -> int | None:
    governor = monitor.governor
    reading = read_memory()
    free = reading.available_bytes if reading is not None else None
    if governor.budget_bytes is not None and governor.used_bytes is not None:
        left = governor.budget_bytes - governor.used_bytes
        free = left if free is None else min(free, left)
    return free


async def estimate_for(request: Request, data: dict, body: ChatCompletionRequest, host: ModelHost | None,
                       model_id: str) -> dict:
    from mlxcel.api.openai.chat_routes import turn_spec

    monitor = request.app.state.monitor
    await monitor.learn_served()
    max_tokens = next((v for v in (body.max_completion_tokens, body.max_tokens) if v is not None), None)
    if host is None or not host.ready:
        fleet = request.app.state.fleet
        footprint = estimate_footprint(fleet.config.models[model_id], fleet.base)
        slots = fleet.config.models[model_id].load.parallel or fleet.base.parallel
        prompt = math.ceil(_text_chars(data.get("messages")) / CHARS_PER_TOKEN)
        answer = estimate(prompt_tokens=prompt, max_tokens=max_tokens,
                          kv_bytes_per_token=footprint.kv_bytes_per_token or None,
                          prefill_transient_bytes=footprint.weights_bytes + footprint.compute_bytes,
                          context_limit=footprint.n_ctx // max(1, slots) if footprint.n_ctx else None,
                          free_bytes=_free_bytes(monitor), drained_bytes=None, resident=False)
        return {"model": model_id, **answer, "prompt_tokens_estimated": True}
    spec = turn_spec(data, body, host)
    rendered = await asyncio.to_thread(RenderedTurn.render, host, spec)
    media = rendered.prepared.media
    if media is None:
        tokens = rendered.prepared.tokens
    else:  # 003: a media request is rendered but not estimated (no fetch, no encode): its text is counted
        text = rendered.prepared.prompt.replace(MEDIA_MARKER, "")
        tokens = await asyncio.to_thread(host.tokenizer.encode, text, add_special=rendered.prepared.add_special)
    engine = host.engine
    slot_tokens = [list(slot.cached_tokens) for slot in engine.slots]  # copies: the engine thread owns them
    covered = host.host_cache.covered(tokens) if host.host_cache is not None else 0
    warm, tier = warm_prefix(tokens, slot_tokens, covered)
    snapshot = engine.snapshot
    rates = rates_of(snapshot)
    per_token = monitor.kv_bytes_per_token(host)
    held_kv = (per_token or 0) * sum(slot.n_cached for slot in snapshot.slots if slot.busy)
    free = _free_bytes(monitor)
    prefill = rates.prefill_tok_s_recent or _lifetime_prefill(snapshot)
    wait = queue_wait_s(snapshot.queue_depth, snapshot.n_idle, snapshot.n_busy, rates.decode_tok_s_recent,
                        rates.mean_generated_recent)
    answer = estimate(prompt_tokens=len(tokens), warm_tokens=warm, cache_tier=tier, max_tokens=max_tokens,
                      kv_bytes_per_token=per_token, context_limit=host.slot_context, free_bytes=free,
                      drained_bytes=free + held_kv if free is not None else None, prefill_tok_s=prefill,
                      queue_wait_s=wait, resident=True)
    if media is not None:
        return {"model": model_id, **answer, "est_ttft_s": None, "prompt_tokens_estimated": True,
                "media_parts": len(media.refs)}
    return {"model": model_id, **answer}


def _lifetime_prefill(snapshot) -> float | None:
    stats = snapshot.stats
    return stats.prefill_tokens / stats.prompt_seconds if stats.prompt_seconds > 0 else None


@router.post("/v1/estimate")
async def estimate_route(request: Request):
    data = await read_json_object(request)
    fleet = request.app.state.fleet
    if fleet is None:
        host = request.app.state.host
        host.require_ready()
        body = validate(ChatCompletionRequest, data)
        return await estimate_for(request, data, body, host, host.model_id)
    model, profile = data.get("model"), data.pop("profile", None)
    if model is not None and not isinstance(model, str) or profile is not None and not isinstance(profile, str):
        raise invalid_request("`model` and `profile` must be strings")
    addressed = address(fleet.config, model or None, profile or None, family_of)
    data = apply_defaults("chat", data, addressed.defaults)
    body = validate(ChatCompletionRequest, data)
    resident = fleet.resident(addressed.entry.id)
    return await estimate_for(request, data, body, resident.host if resident is not None else None,
                              addressed.entry.id)
