"""Prometheus metrics (--metrics), read from the engine's published snapshot at scrape time."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.utils import floatToGoString

from mlxcel.turn.model_host import ModelHost

router = APIRouter()

# (name, type, help, reader) -- names exactly as the spec lists them
_SERIES = [
    ("mlxcel_requests_total", "counter",
     "Total number of completed generation requests; chat completion streams cancelled by the client are excluded",
     lambda s: s.stats.requests_completed),
    ("mlxcel_prompt_tokens_total", "counter", "Total prompt tokens processed", lambda s: s.stats.prompt_tokens),
    ("mlxcel_completion_tokens_total", "counter",
     "Total completion tokens of the requests counted in mlxcel_requests_total", lambda s: s.stats.completion_tokens),
    ("mlxcel_generation_time_seconds_total", "counter", "Total generation time in seconds",
     lambda s: s.stats.generation_seconds),
    ("mlxcel_slots_total", "gauge", "Total number of parallel slots", lambda s: len(s.slots)),
    ("mlxcel_slots_available", "gauge", "Available parallel slots", lambda s: s.n_idle),
    ("mlxcel_queue_depth", "gauge", "Current prefill queue depth", lambda s: s.queue_depth),
    ("mlxcel_batch_sequences_started", "counter", "Total sequences that entered prefill",
     lambda s: s.stats.sequences_started),
    ("mlxcel_batch_sequences_completed", "counter", "Total sequences that completed generation",
     lambda s: s.stats.sequences_completed),
    ("mlxcel_batch_prefill_tokens_total", "counter", "Cumulative prefill tokens processed",
     lambda s: s.stats.prefill_tokens),
    ("mlxcel_batch_decode_tokens_total", "counter", "Cumulative decode tokens generated",
     lambda s: s.stats.decode_tokens),
    ("mlxcel_batch_current_size", "gauge", "Current active batch size", lambda s: s.n_busy),
    ("mlxcel_cache_pool_active", "gauge", "Active cache entries", lambda s: s.n_cached_slots),
]


def render(host: ModelHost) -> str:
    """Prometheus text format, series named exactly as the spec lists them (its two
    counters without a `_total` suffix rule out prometheus_client's own renderer)."""
    if host.engine is None:
        return ""
    snapshot = host.engine.snapshot
    lines = []
    for name, kind, help_text, read in _SERIES:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name} {floatToGoString(read(snapshot))}")
    return "\n".join(lines) + "\n"


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(render(request.app.state.host), media_type=CONTENT_TYPE_LATEST)
