"""The /v1/metrics JSON snapshot and its Prometheus rendering, built from a view the
server fills (the resident models' engine snapshots and tables, the queue counters,
the governor, the host-memory probe). Pure: no routes here.

Everything sits under a top-level `server` key (003). Sections:

- concurrency: decode_batch (slots over the resident models), queue_cap, in_flight
  (requests in a slot), waiting (requests queued for one).
- queue: waiting, cap, eta_s (the Retry-After a queue-cap rejection would carry now,
  mlxcel.engine.drain.drain_eta_s), rejections, last_reject_reason.
- requests[]: one row per request, queued rows first (by model, in serving order),
  then the running ones; state queued, prefill or decode. position: the place in its
  model's queue (1 = next), null once running; slot: the slot running it. elapsed_s
  and ttft_s count from the request's arrival (queue wait included); decode_tok_s is
  (generated - 1) over the time since its first token. cache: {tier, warm_tokens},
  null while queued. speculative: {rounds, drafted, accepted, accept_rate} when its
  engine drafts, else null. Rows refresh when the engine publishes (at most every
  PUBLISH_INTERVAL_S while busy).
- resident_models[]: id, profile, pinned, kept, decode_batch, queue_cap, in_flight,
  waiting, weights_bytes, kv_bytes (KV of the tokens the slots hold), kv_allocated_bytes
  (the whole KV cache llama.cpp allocated), cache_bytes (the host prompt cache).
- governor: MemoryGovernor.snapshot() (band, counters).
- memory: total_bytes, available_bytes, process_rss_bytes (the probe), active_bytes
  (= the process RSS: our counterpart of MLX's active memory), headroom_bytes
  (available - the governor's floor), and the sums weights_bytes, kv_bytes, cache_bytes.
- capacity: {overcommit, models: {id: the boot capacity table or null}}.
- rates: the server's totals (mlxcel.engine.rates.combine) plus models: {id: rates}.

Each section is built on its own: an exception there leaves that section's fields
null (with an `error` string) and the rest of the snapshot answers. An unreadable
memory probe nulls only the probe's fields.

Prometheus (`render_prometheus`): every section flattened to gauges named
mlxcel_<section>_<field> (cumulative counts as counters ending in _total);
mlxcel_governor_band{band} is 1 for the current band and 0 for the others;
mlxcel_capacity_max_ctx{width}, mlxcel_capacity_max_width_at_depth{depth}; per-model
series carry a `model` label, and a `profile` label when the model's entry has one;
requests[] contributes only mlxcel_requests_count{state}. Null fields are left out."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from prometheus_client.utils import floatToGoString

from mlxcel.engine.drain import drain_eta_s
from mlxcel.engine.host_memory import HostMemory, read_host_memory
from mlxcel.engine.rates import Rates, combine, rates_of
from mlxcel.engine.slots import SlotState
from mlxcel.engine.snapshot import EngineSnapshot, SlotView
from mlxcel.fleet.capacity import CapacityTable, overcommit
from mlxcel.fleet.governor import Band, MemoryGovernor
from mlxcel.fleet.readiness import QueueCounters

log = logging.getLogger("mlxcel.metrics")


@dataclass
class ModelView:
    """One resident model as the server sees it; `engine` None while it loads."""

    id: str
    engine: EngineSnapshot | None
    queue_cap: int = 0
    profile: str | None = None
    pinned: bool = False
    kept: bool = False
    weights_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    cache_bytes: int | None = None
    capacity: CapacityTable | None = None


@dataclass
class SnapshotView:
    models: Sequence[ModelView]
    queue: QueueCounters = field(default_factory=QueueCounters)
    governor: MemoryGovernor | None = None
    read_memory: Callable[[], HostMemory] = read_host_memory
    now: float | None = None  # time.monotonic(); None: when building


FIELDS = {
    "concurrency": ("decode_batch", "queue_cap", "in_flight", "waiting"),
    "queue": ("waiting", "cap", "eta_s", "rejections", "last_reject_reason"),
    "governor": ("enabled", "band", "band_changes", "sheds", "last_shed", "deferred_loads"),
    "memory": ("total_bytes", "available_bytes", "process_rss_bytes", "active_bytes", "headroom_bytes",
               "weights_bytes", "kv_bytes", "cache_bytes"),
    "capacity": ("overcommit", "models"),
    "rates": ("decode_tok_s", "decode_streams", "prefill_tok_s_recent", "decode_tok_s_recent",
              "decode_tok_s_lifetime", "mean_generated_recent", "models"),
}


def build_snapshot(view: SnapshotView) -> dict:
    now = time.monotonic() if view.now is None else view.now
    server: dict = {"taken_at": time.time()}
    builders = [
        ("concurrency", lambda: _concurrency(view)),
        ("queue", lambda: _queue(view, now)),
        ("requests", lambda: _requests(view, now)),
        ("resident_models", lambda: [_resident(model) for model in view.models]),
        ("governor", lambda: _governor(view)),
        ("memory", lambda: _memory(view)),
        ("capacity", lambda: _capacity(view)),
        ("rates", lambda: _rates(view, now)),
    ]
    for name, build in builders:
        try:
            server[name] = build()
        except Exception as exc:  # noqa: BLE001 - one probe's failure nulls its own section
            log.warning("metrics section %s failed: %s: %s", name, type(exc).__name__, exc)
            server[name] = _nulled(name, exc)
    return {"server": server}


def _nulled(name: str, exc: Exception):
    if name not in FIELDS:
        return None
    return {**{key: None for key in FIELDS[name]}, "error": f"{type(exc).__name__}: {exc}"}


def _engines(view: SnapshotView) -> list[tuple[ModelView, EngineSnapshot]]:
    return [(model, model.engine) for model in view.models if model.engine is not None]


def _concurrency(view: SnapshotView) -> dict:
    engines = _engines(view)
    return {
        "decode_batch": sum(len(e.slots) for _, e in engines),
        "queue_cap": _queue_cap(view),
        "in_flight": sum(e.n_busy for _, e in engines),
        "waiting": sum(e.queue_depth for _, e in engines),
    }


def _queue_cap(view: SnapshotView) -> int:
    return view.queue.cap if view.queue.cap is not None else sum(m.queue_cap for m in view.models)


def _queue(view: SnapshotView, now: float) -> dict:
    engines = _engines(view)
    waiting = sum(e.queue_depth for _, e in engines)
    rates = combine(rates_of(e, now) for _, e in engines)
    eta = drain_eta_s(waiting, sum(e.n_busy for _, e in engines), rates.decode_tok_s_recent,
                      rates.mean_generated_recent)
    return {"waiting": waiting, "cap": _queue_cap(view), "eta_s": eta, "rejections": view.queue.rejections,
            "last_reject_reason": view.queue.last_reject_reason}


def _requests(view: SnapshotView, now: float) -> list[dict]:
    queued, running = [], []
    for model, engine in _engines(view):
        for position, waiting in enumerate(engine.queued, 1):
            queued.append({
                "id": waiting.request_id, "model": model.id, "state": "queued", "position": position, "slot": None,
                "prompt_tokens": waiting.n_prompt_tokens, "generated": 0, "max_tokens": _cap(waiting.max_tokens),
                "elapsed_s": _seconds(now - waiting.created), "ttft_s": None, "decode_tok_s": None,
                "cache": None, "speculative": None,
            })
        for slot in engine.slots:
            if slot.busy:
                running.append(_running_row(model.id, slot, engine.speculative, now))
    return queued + running


def _running_row(model: str, slot: SlotView, speculative: bool, now: float) -> dict:
    first = slot.first_token_at
    rate = None
    if first > 0 and slot.n_decoded > 1 and now > first:
        rate = round((slot.n_decoded - 1) / (now - first), 2)
    spec = None
    if speculative:
        spec = {"rounds": slot.draft_rounds, "drafted": slot.draft_n, "accepted": slot.draft_accepted,
                "accept_rate": round(slot.draft_accepted / slot.draft_n, 3) if slot.draft_n else None}
    return {
        "id": slot.request_id, "model": model,
        "state": "decode" if slot.state is SlotState.DECODE else "prefill",
        "position": None, "slot": slot.id,
        "prompt_tokens": slot.n_prompt_tokens, "generated": slot.n_decoded, "max_tokens": _cap(slot.max_tokens),
        "elapsed_s": _seconds(now - slot.created),
        "ttft_s": _seconds(first - slot.created) if first > 0 else None,
        "decode_tok_s": rate,
        "cache": {"tier": slot.cache_tier, "warm_tokens": slot.n_reused},
        "speculative": spec,
    }


def _cap(max_tokens: int) -> int | None:
    return max_tokens if max_tokens >= 0 else None


def _seconds(value: float) -> float:
    return round(max(0.0, value), 3)


def _kv_bytes(model: ModelView) -> int | None:
    if model.engine is None or model.kv_bytes_per_token is None:
        return None
    return model.kv_bytes_per_token * sum(slot.n_cached for slot in model.engine.slots)


def _resident(model: ModelView) -> dict:
    engine = model.engine
    table = model.capacity
    return {
        "id": model.id, "profile": model.profile, "pinned": model.pinned, "kept": model.kept,
        "loaded": engine is not None,
        "decode_batch": len(engine.slots) if engine is not None else None,
        "queue_cap": model.queue_cap,
        "in_flight": engine.n_busy if engine is not None else None,
        "waiting": engine.queue_depth if engine is not None else None,
        "weights_bytes": model.weights_bytes,
        "kv_bytes": _kv_bytes(model),
        "kv_allocated_bytes": table.to_dict()["bytes"]["kv_slots"] if table is not None else None,
        "cache_bytes": model.cache_bytes,
        "speculative": engine.speculative if engine is not None else None,
    }


def _governor(view: SnapshotView) -> dict:
    if view.governor is None:
        return {**{key: None for key in FIELDS["governor"]}, "enabled": False}
    return view.governor.snapshot()


def _sum(values) -> int | None:
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _memory(view: SnapshotView) -> dict:
    section = {
        "weights_bytes": _sum(m.weights_bytes for m in view.models),
        "kv_bytes": _sum(_kv_bytes(m) for m in view.models),
        "cache_bytes": _sum(m.cache_bytes for m in view.models),
    }
    try:
        host = view.read_memory()
    except Exception as exc:  # noqa: BLE001 - the probe's fields go null, the sums stay
        log.warning("host memory probe failed: %s", exc)
        probe = dict.fromkeys(("total_bytes", "available_bytes", "process_rss_bytes", "active_bytes",
                               "headroom_bytes"))
        return {**probe, **section, "error": f"{type(exc).__name__}: {exc}"}
    floor = view.governor.floor_bytes if view.governor is not None else 0
    return {
        "total_bytes": host.total_bytes, "available_bytes": host.available_bytes,
        "process_rss_bytes": host.process_rss_bytes, "active_bytes": host.process_rss_bytes,
        "headroom_bytes": host.available_bytes - floor, **section,
    }


def _capacity(view: SnapshotView) -> dict:
    return {"overcommit": overcommit(),
            "models": {m.id: m.capacity.to_dict() if m.capacity is not None else None for m in view.models}}


def _rates(view: SnapshotView, now: float) -> dict:
    per_model: dict[str, Rates] = {m.id: rates_of(e, now) for m, e in _engines(view)}
    total = combine(per_model.values())
    return {**total.to_dict(), "models": {name: rates.to_dict() for name, rates in per_model.items()}}


# -- Prometheus ---------------------------------------------------------------------------

class _Families:
    def __init__(self) -> None:
        self.families: dict[str, tuple[str, str, list[tuple[dict, float]]]] = {}

    def add(self, name: str, value, labels: dict | None = None, kind: str = "gauge", help_text: str = "") -> None:
        if value is None or isinstance(value, (str, dict, list)):
            return
        name = f"mlxcel_{name}"
        if name not in self.families:
            self.families[name] = (kind, help_text or f"{name} (see /v1/metrics)", [])
        self.families[name][2].append((labels or {}, float(value)))

    def render(self) -> str:
        lines = []
        for name, (kind, help_text, samples) in self.families.items():
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")
            for labels, value in samples:
                lines.append(f"{name}{_labels(labels)} {floatToGoString(value)}")
        return "\n".join(lines) + "\n"


def _labels(labels: dict) -> str:
    if not labels:
        return ""
    escaped = (f'{key}="{_escape(str(value))}"' for key, value in labels.items())
    return "{" + ",".join(escaped) + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


_COUNTERS = {("queue", "rejections"), ("governor", "band_changes"), ("governor", "sheds"),
             ("governor", "deferred_loads")}


def render_prometheus(snapshot: dict) -> str:
    """The snapshot as Prometheus text (format 0.0.4)."""
    server = snapshot.get("server", {})
    out = _Families()
    for section in ("concurrency", "queue", "memory"):
        _flat(out, section, server.get(section))
    requests = server.get("requests")
    if isinstance(requests, list):
        for state in ("queued", "prefill", "decode"):
            out.add("requests_count", sum(1 for row in requests if row.get("state") == state), {"state": state},
                    help_text="Requests in the snapshot, by state")
    model_labels = {}
    for entry in server.get("resident_models") or []:
        labels = {"model": entry["id"]}
        if entry.get("profile"):
            labels["profile"] = entry["profile"]
        model_labels[entry["id"]] = labels
        for key, value in entry.items():
            if key not in ("id", "profile"):
                out.add(f"resident_model_{key}", value, labels, help_text=f"resident_models[].{key} of /v1/metrics")
    out.add("resident_models", len(model_labels), help_text="Resident models")
    _governor_series(out, server.get("governor"))
    _capacity_series(out, server.get("capacity"), model_labels)
    rates = server.get("rates") or {}
    for name, per_model in (rates.get("models") or {}).items():
        labels = model_labels.get(name, {"model": name})
        for key, value in per_model.items():
            out.add(f"rates_{key}", value, labels, help_text=f"rates.models[].{key} of /v1/metrics")
    return out.render()


def _flat(out: _Families, section: str, values: dict | None) -> None:
    for key, value in (values or {}).items():
        help_text = f"{section}.{key} of /v1/metrics"
        if (section, key) in _COUNTERS:
            out.add(f"{section}_{key}_total", value, kind="counter", help_text=help_text)
        else:
            out.add(f"{section}_{key}", value, help_text=help_text)


def _governor_series(out: _Families, governor: dict | None) -> None:
    if not governor:
        return
    band = governor.get("band")
    if band is not None:
        for each in Band:
            out.add("governor_band", 1 if each.value == band else 0, {"band": each.value},
                    help_text="1 for the memory governor's current band")
    for key in ("enabled", "band_changes", "sheds", "deferred_loads", "budget_bytes", "used_bytes", "floor_bytes"):
        help_text = f"governor.{key} of /v1/metrics"
        if ("governor", key) in _COUNTERS:
            out.add(f"governor_{key}_total", governor.get(key), kind="counter", help_text=help_text)
        else:
            out.add(f"governor_{key}", governor.get(key), help_text=help_text)


def _capacity_series(out: _Families, capacity: dict | None, model_labels: dict) -> None:
    if not capacity:
        return
    out.add("capacity_overcommit", capacity.get("overcommit"))
    for name, table in (capacity.get("models") or {}).items():
        if not table:
            continue
        labels = model_labels.get(name, {"model": name})
        for width, tokens in table["max_ctx"].items():
            out.add("capacity_max_ctx", tokens, {**labels, "width": width},
                    help_text="Tokens per stream that fit at this many streams")
        for depth, width in table["max_width_at_depth"].items():
            out.add("capacity_max_width_at_depth", width, {**labels, "depth": depth},
                    help_text="Streams that fit at this many tokens each")
        for key, value in table["bytes"].items():
            out.add(f"capacity_{key}_bytes", value, labels, help_text=f"capacity.models[].bytes.{key} of /v1/metrics")
        out.add("capacity_decode_batch", table["decode_batch"], labels)
        out.add("capacity_slot_ctx", table["slot_ctx"], labels)
