"""Prometheus metrics (--metrics), read from the engine's published snapshot at scrape
time: the spec's `mlxcel_*` series, then llama-server's `llamacpp:*` ones with its
names, types, help texts and meaning (prompt tokens served from the cache are counted
apart from processed ones; the generation rate leaves out each request's first token,
which costs no decode; the two rates cover the time since the previous scrape).
Without --metrics the route answers llama-server's 501."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client.utils import floatToGoString

from mlxcel.engine.snapshot import EngineSnapshot
from mlxcel.http.errors import APIError
from mlxcel.http.header_case import cased
from mlxcel.observability.metrics_view import snapshot_response
from mlxcel.turn.model_host import ModelHost
from mlxcel.turn.worker_sleep import SleepingWorker

router = APIRouter()

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # llama-server's text format version
START_TIME_HEADER = cased("Process-Start-Time-Unix")
DISABLED = "This server does not support metrics endpoint. Start it with `--metrics`"

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
    # how time to first token splits (divide by mlxcel_first_tokens_total for a mean per request)
    ("mlxcel_first_tokens_total", "counter", "Requests that reached their first token", lambda s: s.stats.first_tokens),
    ("mlxcel_first_token_wait_seconds_total", "counter", "Time those requests waited for a slot",
     lambda s: s.stats.first_token_wait_seconds),
    ("mlxcel_first_token_restore_seconds_total", "counter",
     "Time their admissions took (saving, copying or restoring a cached prefix)",
     lambda s: s.stats.first_token_restore_seconds),
    ("mlxcel_first_token_prefill_seconds_total", "counter", "Time from their admission to their first token",
     lambda s: s.stats.first_token_prefill_seconds),
    ("mlxcel_first_token_prefill_tokens_total", "counter",
     "Prompt tokens they decoded (the rest of their prompts came from a cache)",
     lambda s: s.stats.first_token_prefill_tokens),
    # where the engine thread's time goes (a profile without a profiler: divide by the steps)
    ("mlxcel_engine_steps_total", "counter", "Engine steps that decoded a batch", lambda s: s.stats.steps),
    ("mlxcel_engine_step_schedule_seconds_total", "counter", "Time planning batches (drafting included)",
     lambda s: s.stats.step_schedule_seconds),
    ("mlxcel_engine_step_fill_seconds_total", "counter", "Time writing batches", lambda s: s.stats.step_fill_seconds),
    ("mlxcel_engine_step_decode_seconds_total", "counter", "Time in llama_decode",
     lambda s: s.stats.step_decode_seconds),
    ("mlxcel_engine_step_sample_seconds_total", "counter", "Time sampling (reading logits included)",
     lambda s: s.stats.step_sample_seconds),
    ("mlxcel_engine_step_emit_seconds_total", "counter", "Time handing token events to the HTTP side",
     lambda s: s.stats.step_emit_seconds),
    # prompt lookup's drafts copied from earlier requests' outputs (of llamacpp:spec_decode_*)
    ("mlxcel_spec_traffic_draft_tokens_total", "counter", "Draft tokens copied from earlier requests' outputs",
     lambda s: s.stats.traffic_draft_tokens),
    ("mlxcel_spec_traffic_accepted_tokens_total", "counter",
     "Draft tokens copied from earlier requests' outputs that were accepted",
     lambda s: s.stats.traffic_draft_accepted),
    ("mlxcel_spec_lookup_cache_draft_tokens_total", "counter", "Draft tokens from the lookup caches (-lcs, -lcd)",
     lambda s: s.stats.lookup_cache_draft_tokens),
    ("mlxcel_spec_lookup_cache_accepted_tokens_total", "counter",
     "Draft tokens from the lookup caches (-lcs, -lcd) that were accepted",
     lambda s: s.stats.lookup_cache_draft_accepted),
]

# llama-server's series (without their `llamacpp:` prefix): counters, then gauges
_LLAMACPP_COUNTERS = [
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens",
     lambda s: s.stats.prefill_tokens),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache",
     lambda s: s.stats.prompt_tokens_cached),
    ("prompt_seconds_total", "Total time spent processing prompts", lambda s: s.stats.prompt_seconds),
    ("tokens_predicted_total", "Number of generation tokens processed", lambda s: s.stats.predicted_tokens),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens", lambda s: s.stats.predicted_seconds),
    ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
     lambda s: s.stats.n_decode),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)", lambda s: s.stats.n_tokens_max),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated",
     lambda s: s.stats.draft_tokens),
    ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model",
     lambda s: s.stats.draft_accepted),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps",
     lambda s: s.stats.draft_rounds),
]


@dataclass
class ScrapeWindow:
    """The cumulative counts at the previous scrape: the two throughput gauges are
    averaged over the time between scrapes, as llama-server's buckets are."""

    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    predicted_steps: int = 0
    predicted_seconds: float = 0.0

    def rates(self, snapshot: EngineSnapshot) -> tuple[float, float]:
        stats = snapshot.stats
        prompt_time = stats.prompt_seconds - self.prompt_seconds
        predict_time = stats.predicted_seconds - self.predicted_seconds
        prompt_rate = (stats.prefill_tokens - self.prompt_tokens) / prompt_time if prompt_time > 0 else 0.0
        predict_rate = (stats.predicted_steps - self.predicted_steps) / predict_time if predict_time > 0 else 0.0
        self.prompt_tokens, self.prompt_seconds = stats.prefill_tokens, stats.prompt_seconds
        self.predicted_steps, self.predicted_seconds = stats.predicted_steps, stats.predicted_seconds
        return prompt_rate, predict_rate


def _llamacpp_gauges(snapshot: EngineSnapshot, window: ScrapeWindow) -> list[tuple[str, str, float]]:
    prompt_rate, predict_rate = window.rates(snapshot)
    stats = snapshot.stats
    return [
        ("prompt_tokens_seconds", "Average prompt throughput in tokens/s", prompt_rate),
        ("predicted_tokens_seconds", "Average generation throughput in tokens/s", predict_rate),
        ("requests_processing", "Number of requests processing", snapshot.n_busy),
        ("requests_deferred", "Number of requests deferred", snapshot.queue_depth),
        ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call",
         stats.n_busy_slots / max(stats.n_decode, 1)),
    ]


def _family(lines: list[str], name: str, kind: str, help_text: str, value: float) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    lines.append(f"{name} {floatToGoString(value)}")


def _accepted_per_position(lines: list[str], accepted_at: tuple[int, ...]) -> None:
    """llama-server's labeled counter, a series per draft position, once a finished
    request had drafts verified."""
    if not accepted_at:
        return
    name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
    lines.append(f"# HELP {name} Accepted tokens per draft position")
    lines.append(f"# TYPE {name} counter")
    lines.extend(f'{name}{{position="{i}"}} {floatToGoString(n)}' for i, n in enumerate(accepted_at))


def _snapshot(host: ModelHost) -> EngineSnapshot | None:
    """The engine's snapshot; asleep, its last one. While the model loads (or after it
    failed) there is none: llama-server's 503 "Loading model" (or the failure), not an
    empty exposition a scraper would take for a healthy target."""
    if host.engine is not None:
        return host.engine.snapshot
    snapshot = host.asleep.get("snapshot")
    if snapshot is None and not host.absent:
        host.require_ready()
    return snapshot


# an encoder model's counters (the embedding model, the reranker): (name, help, EmbeddingStats field)
_ENCODER_COUNTERS = (
    ("requests_total", "requests answered", "jobs_done"),
    ("inputs_total", "inputs encoded (texts; for the reranker, query-document pairs)", "inputs_done"),
    ("tokens_total", "input tokens encoded", "tokens_done"),
    ("decodes_total", "llama_decode calls", "decodes"),
)


def render(host: ModelHost, window: ScrapeWindow, encoders: tuple[tuple[str, SleepingWorker], ...] = ()) -> str:
    """Prometheus text format, series named exactly as the spec and llama-server name
    them (the spec's two counters without a `_total` suffix and llama-server's colons
    rule out prometheus_client's own renderer), then each encoder model's (`encoders`:
    its kind, embedding or rerank, and its host)."""
    lines: list[str] = []
    snapshot = _snapshot(host)
    if snapshot is not None:  # none with --embedding / --reranking: no generation engine
        for name, kind, help_text, read in _SERIES:
            _family(lines, name, kind, help_text, read(snapshot))
        for name, help_text, read in _LLAMACPP_COUNTERS:
            _family(lines, f"llamacpp:{name}", "counter", help_text, read(snapshot))
        for name, help_text, value in _llamacpp_gauges(snapshot, window):
            _family(lines, f"llamacpp:{name}", "gauge", help_text, value)
        _accepted_per_position(lines, snapshot.stats.accepted_at)
    projector = host.projector
    if projector is not None:
        _family(lines, "mlxcel_media_chunks_encoded_total", "counter",
                "Media chunks (images, audio windows, video frames) the projector encoded", projector.encoded)
        _family(lines, "mlxcel_media_chunks_reused_total", "counter",
                "Media chunks taken from the projector's embedding cache instead of encoded again", projector.reused)
    for kind, worker in encoders:
        stats = worker.stats
        for suffix, help_text, field in _ENCODER_COUNTERS:
            _family(lines, f"mlxcel_{kind}_{suffix}", "counter", f"The {kind} model's {help_text}",
                    getattr(stats, field))
        _family(lines, f"mlxcel_{kind}_queue_depth", "gauge", f"The {kind} model's requests waiting or running",
                worker.outstanding)
    return "\n".join(lines) + "\n"


def _wants_json(request: Request) -> bool:
    return (request.query_params.get("format") == "json"
            or request.headers.get("accept", "").split(";")[0].strip() == "application/json")


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    host: ModelHost | None = request.app.state.host
    if _wants_json(request):
        return await snapshot_response(request, "json")
    if host is None:  # many models: the snapshot's gauges, per model
        return await snapshot_response(request, "prometheus")
    if not host.config.metrics:
        raise APIError(501, DISABLED, "not_supported_error", 501)
    window = getattr(request.app.state, "metrics_window", None)
    if window is None:
        window = request.app.state.metrics_window = ScrapeWindow()
    state = request.app.state
    encoders = tuple((kind, worker) for kind, worker in (("embedding", getattr(state, "embedding_host", None)),
                                                         ("rerank", getattr(state, "rerank", None)))
                     if worker is not None)
    response = Response(render(host, window, encoders), media_type=CONTENT_TYPE)
    response.raw_headers.append((START_TIME_HEADER, str(host.created).encode()))
    return response
