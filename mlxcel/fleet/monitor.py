"""What the server watches about its models, in both modes (one model or many): the
memory governor (a tick a few times a second: the band, and in the red band the
largest request shed), each resident model's boot capacity table, the queue-cap
counters, read by /v1/metrics, /v1/estimate, /v1/capacity/plan and /health?ready=1."""

from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass

from mlxcel.config import ServerConfig
from mlxcel.engine.host_memory import HostMemory, MemoryProbeError, read_host_memory
from mlxcel.fleet.capacity import CapacityTable, build_table
from mlxcel.fleet.footprint import compute_bytes
from mlxcel.fleet.governor import MemoryGovernor, held_bytes, live_requests
from mlxcel.fleet.readiness import QueueCounters
from mlxcel.fleet.residency import Fleet
from mlxcel.models.gguf_header import kv_bytes_per_token, model_geometry
from mlxcel.turn.model_host import ModelHost

log = logging.getLogger("mlxcel.monitor")
TICK_S = 0.5
BUDGET_SHARE = 0.8  # without server.budget_gb: this share of the host's memory


@dataclass
class Served:
    """One model the server holds now."""

    id: str
    host: ModelHost
    pinned: bool = False
    kept: bool = False
    profile: str | None = None


def read_memory() -> HostMemory | None:
    try:
        return read_host_memory()
    except (MemoryProbeError, OSError) as exc:
        log.debug("memory probe failed: %s", exc)
        return None


def default_budget() -> int | None:
    memory = read_memory()
    return int(memory.total_bytes * BUDGET_SHARE) if memory is not None else None


class ServerMonitor:
    def __init__(self, config: ServerConfig, host: ModelHost | None, fleet: Fleet | None) -> None:
        self.config, self.host, self.fleet = config, host, fleet
        budget = fleet.budget_bytes if fleet is not None else None
        self.governor = MemoryGovernor(budget if budget is not None else default_budget())
        if fleet is not None:
            fleet.governor = self.governor
            if fleet.budget_bytes is None:
                fleet.budget_bytes = self.governor.budget_bytes
        self.queue = QueueCounters()
        # built once per loaded copy (weak: an unloaded host takes its entries with it)
        self._tables: weakref.WeakKeyDictionary[ModelHost, CapacityTable | None] = weakref.WeakKeyDictionary()
        self._kv_per_token: weakref.WeakKeyDictionary[ModelHost, int | None] = weakref.WeakKeyDictionary()

    # -- what is resident ---------------------------------------------------------------

    def served(self) -> list[Served]:
        if self.fleet is None:
            host = self.host
            return [Served(host.model_id, host, pinned=True)] if host is not None and host.ready else []
        return [Served(r.id, r.host, r.id in self.fleet.pinned, r.kept, r.entry.profile)
                for r in self.fleet.resident_list() if r.ready and r.host.engine is not None]

    @staticmethod
    def fixed_bytes(host: ModelHost) -> int:
        """What a loaded model holds whatever its requests: weights and compute buffers."""
        n_vocab = host.tokenizer.n_vocab if host.tokenizer is not None else 0
        return host.runtime.model_size() + compute_bytes(n_vocab, host.config.ubatch_size)

    async def learn_served(self) -> None:
        """Each newly served model's KV bytes per token, read off the event loop: its
        GGUF header's vocabulary alone is ~0.2 s of Python parsing. The tick does it, and
        each route that reports from them first (a model loaded since the last tick)."""
        for s in self.served():
            if s.host not in self._kv_per_token:
                self._kv_per_token[s.host] = await asyncio.to_thread(_kv_per_token, s.host)

    def kv_bytes_per_token(self, host: ModelHost) -> int | None:
        """None also until `learn_served` has read it (never read here: this runs on the
        event loop)."""
        return self._kv_per_token.get(host)

    def table(self, host: ModelHost) -> CapacityTable | None:
        """The model's capacity table, built once from its geometry and the memory at hand
        (once its geometry is read: none before)."""
        if host not in self._kv_per_token:
            return None
        if host not in self._tables:
            self._tables[host] = self._build_table(host)
        return self._tables[host]

    def _build_table(self, host: ModelHost) -> CapacityTable | None:
        per_token = self.kv_bytes_per_token(host)
        runtime = host.runtime
        if not per_token or runtime is None:
            return None
        weights = runtime.model_size()
        compute = self.fixed_bytes(host) - weights
        memory = self.governor.budget_bytes
        if memory is None:
            reading = read_memory()
            memory = reading.available_bytes + weights if reading is not None else None
        if memory is None:
            return None
        if self.fleet is not None:  # what the other resident models hold is not this one's
            memory -= sum(self.fixed_bytes(s.host) for s in self.served() if s.host is not host)
        return build_table(host.model_id, kv_bytes_per_token=per_token, weights_bytes=weights,
                           compute_bytes=compute, memory_bytes=max(0, memory),
                           decode_batch=len(host.engine.slots) if host.engine else host.config.parallel,
                           slot_ctx=host.slot_context, n_ctx_train=runtime.n_ctx_train)

    # -- the governor's tick ------------------------------------------------------------

    def tick(self) -> None:
        served = self.served()
        used = 0
        candidates = []
        for s in served:
            snapshot = s.host.engine.snapshot
            used += held_bytes(self.fixed_bytes(s.host), self.kv_bytes_per_token(s.host) or 0, snapshot)
            candidates += [(request, s.host) for request in live_requests(s.id, snapshot)]
        victim = self.governor.check(read_memory(), used, [request for request, _ in candidates])
        if victim is None:
            return
        host = next(h for request, h in candidates if request is victim)
        log.warning("memory governor (%s): shedding request %d of %s, which holds %d tokens",
                    self.governor.band.value, victim.request_id, victim.model, victim.kv_tokens)
        host.engine.shed(victim.request_id, f"the server is out of memory (governor {self.governor.band.value}): "
                                            f"this request, the largest, was ended to keep the others running")

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self.learn_served()
                self.tick()
            except Exception:
                log.exception("memory governor tick failed")


def _kv_per_token(host: ModelHost) -> int | None:
    """KV bytes one token takes, from the loaded GGUF's geometry and the cache types."""
    from mlxcel.fleet.model_files import metadata

    if host.model_path is None:
        return None
    meta = metadata(str(host.model_path))
    if meta is None:
        return None
    try:
        return kv_bytes_per_token(model_geometry(meta), host.config.cache_type_k, host.config.cache_type_v)
    except (KeyError, ValueError) as exc:
        log.warning("no KV geometry for %s: %s", host.model_id, exc)
        return None
