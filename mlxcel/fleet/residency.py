"""Which models are loaded: each resident model has its own ModelHost (llama context
and engine thread). A model loads on its first request unless pinned, kept or
preloaded; least recently used idle models unload when a load would pass the
residency budget (bytes and count) or their idle timeout; a model is never unloaded
while a request holds it (a lease, from the request's opening to its last byte) or
its engine still has work."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mlxcel.config import ServerConfig
from mlxcel.engine.page_calls import give_back_memory
from mlxcel.fleet.addressing import default_name, resolve_name
from mlxcel.fleet.entries import FleetConfig, ModelEntry
from mlxcel.fleet.errors import ModelBusy, ModelLoadDeferred, ModelNotLoaded
from mlxcel.fleet.events import FleetEvents
from mlxcel.fleet.footprint import Footprint, estimate_footprint
from mlxcel.fleet.model_files import metadata
from mlxcel.turn.errors import EngineUnavailable
from mlxcel.turn.model_host import HostState, ModelHost

log = logging.getLogger("mlxcel.fleet")
LOAD_POLL_S = 0.02
DEFERRED_RETRY_S = 5


def host_config(base: ServerConfig, entry: ModelEntry) -> ServerConfig:
    """The single-model settings one entry runs with: the server's, changed by its load keys."""
    load = entry.load
    changes: dict = {"model": entry.path, "alias": entry.id, "aliases": [], "embedding_model": None,
                     "embedding_only": False, "rerank_model": None, "rerank_only": False, "context_budget": True}
    chosen = {"ctx_size": load.ctx_size, "parallel": load.parallel, "cache_type_k": load.cache_type_k,
              "cache_type_v": load.cache_type_v, "flash_attn": load.flash_attn, "chat_template": entry.chat_template}
    changes.update({key: value for key, value in chosen.items() if value is not None})
    if entry.mmproj is not None:
        changes["mmproj"] = entry.mmproj
    if entry.adapters:
        changes["lora"] = tuple((path, 1.0) for path in entry.adapters)
    if entry.draft is not None:
        changes["model_draft"] = entry.draft
    changes["spec_type"] = spec_type_of(base, entry)
    return dataclasses.replace(base, **changes)


def spec_type_of(base: ServerConfig, entry: ModelEntry) -> str:
    """How the entry drafts: its draft model, else the server's --spec-type, which an
    entry marked `speculative` turns on as prompt lookup (output unchanged) when it is none."""
    if entry.draft is not None:
        return "draft"
    if entry.speculative and base.spec_type == "none":
        return "ngram-simple"
    return base.spec_type


def _unload(resident: Resident) -> None:
    """An unload on a thread of its own: the model freed, then its memory given back."""
    resident.host.close()
    give_back_memory()


@dataclass(eq=False)
class Resident:
    """One loaded (or loading) model."""

    entry: ModelEntry
    host: ModelHost
    footprint: Footprint
    loaded_at: float = 0.0
    last_used: float = field(default_factory=time.monotonic)
    leases: int = 0  # requests between their opening and their last byte
    kept: bool = False  # POST /v1/keep: survives the idle timeout, LRU-evictable
    retired: bool = False  # its entry changed or left the config: unloads once idle

    @property
    def id(self) -> str:
        return self.entry.id

    @property
    def in_flight(self) -> int:
        """Requests the engine holds (queued or in a slot)."""
        engine = self.host.engine
        return engine.outstanding if engine is not None else 0

    @property
    def busy(self) -> bool:
        return self.leases > 0 or self.in_flight > 0 or self.host.state is HostState.LOADING

    @property
    def ready(self) -> bool:
        return self.host.state is HostState.READY

    @property
    def idle_since(self) -> float:
        """Its last use, or the end of its load when later: a model loaded (by POST
        /models/load, or slower than its timeout) is as fresh as its load."""
        return max(self.last_used, self.loaded_at)


class Lease:
    """A request's hold on a resident model; released once, when its response ends."""

    def __init__(self, fleet: Fleet, resident: Resident) -> None:
        self._fleet, self.resident, self._released = fleet, resident, False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._fleet._release(self.resident)


class Fleet:
    def __init__(self, config: FleetConfig, base: ServerConfig, budget_bytes: int | None = None) -> None:
        self.config = config
        self.base = base
        self.budget_bytes = budget_bytes if budget_bytes is not None else config.budget_bytes
        self.residents: dict[str, Resident] = {}
        self.retiring: list[Resident] = []  # out of `residents`, unloaded once idle
        self.pinned: set[str] = {e.id for e in config.models.values() if e.pin}
        self._lock = threading.RLock()
        self._loading = threading.Lock()  # one load at a time: loads compete for the same cores
        self.governor = None  # the MemoryGovernor (mlxcel.fleet.monitor sets it): loads defer under pressure
        self.load_rejections = 0
        self.last_load_rejection: str | None = None
        self.failures: dict[str, str] = {}  # model id -> why its last load or engine failed (until it loads again)
        self.events = FleetEvents()  # status changes, for GET /models/sse
        self.sleeping: set[str] = set()  # unloaded by --sleep-idle-seconds: a request loads them, autoload or not
        self._closed = False

    # -- addressing ---------------------------------------------------------------

    def entry(self, name: str) -> ModelEntry:
        """The entry an id, an alias or either with @profile names (ModelNotFound else)."""
        return resolve_name(self.config, name)[0]

    @property
    def default_id(self) -> str | None:
        """The model an empty `model` field gets (the configured default may be an alias)."""
        name = default_name(self.config)
        return self.entry(name).id if name else None

    # -- acquiring a model for a request -------------------------------------------

    async def acquire(self, entry: ModelEntry) -> Lease:
        """A lease on `entry`'s loaded model: starts its load when it is not resident
        (evicting idle models when the budget needs the room) and waits for it."""
        with self._lock:
            if not self.config.autoload and entry.id not in self.residents and entry.id not in self.sleeping:
                raise ModelNotLoaded(entry.id)
            resident = self._resident_for(entry)
            resident.leases += 1
            resident.last_used = time.monotonic()
        lease = Lease(self, resident)
        try:
            while resident.host.state is HostState.LOADING:
                await asyncio.sleep(LOAD_POLL_S)
            if resident.host.state is HostState.FAILED:
                raise EngineUnavailable(resident.host.error or "the model failed to load")
        except BaseException:
            lease.release()
            raise
        return lease

    def _release(self, resident: Resident) -> None:
        with self._lock:
            resident.leases -= 1
            resident.last_used = time.monotonic()
        self.close_retired()

    def _retire(self, resident: Resident) -> None:
        """Under the lock: out of service; unloaded as soon as nothing holds it."""
        resident.retired = True
        self._forget(resident)
        if resident not in self.retiring:
            self.retiring.append(resident)

    def close_retired(self) -> None:
        with self._lock:
            idle = [r for r in self.retiring if not r.busy]
            self.retiring = [r for r in self.retiring if r.busy]
        for resident in idle:
            threading.Thread(target=_unload, args=(resident,), name=f"mlxcel-unload-{resident.id}",
                             daemon=True).start()

    def _resident_for(self, entry: ModelEntry) -> Resident:
        """Under the lock: the resident copy of `entry`, loading it if needed."""
        resident = self.residents.get(entry.id)
        if resident is not None and resident.host.state is not HostState.FAILED:
            return resident
        if resident is not None:
            self._retire(resident)
        footprint = estimate_footprint(entry, self.base)
        self._make_room(entry, footprint.total_bytes)
        return self._start_load(entry, footprint)

    def _make_room(self, entry: ModelEntry, need: int) -> None:
        """Unload least recently used idle models until `need` bytes and one more model
        fit; ModelLoadDeferred (nothing unloaded) when the pinned and busy ones leave
        too little."""
        others = [r for r in self.residents.values() if r.id != entry.id]
        held = sum(r.footprint.total_bytes for r in [*others, *self.retiring])
        max_models = self.config.max_models
        budget = self.budget_bytes

        def fits(resident_bytes: int, count: int) -> bool:
            return (budget is None or resident_bytes + need <= budget) and (max_models is None or count < max_models)

        if budget is not None and need > budget:  # no wait makes room: no Retry-After
            self.load_rejections += 1
            self.last_load_rejection = (f"model `{entry.id}` cannot load: it needs {need / 2**20:.0f} MiB, more than "
                                        f"the whole {budget / 2**20:.0f} MiB residency budget")
            raise ModelLoadDeferred(self.last_load_rejection, None)
        self._check_governor(entry, need, [*others, *self.retiring])
        if fits(held, len(others)):
            return
        evictable = sorted((r for r in others if not r.busy and r.id not in self.pinned),
                           key=lambda r: r.idle_since)
        chosen: list[Resident] = []
        for resident in evictable:
            if fits(held, len(others) - len(chosen)):
                break
            chosen.append(resident)
            held -= resident.footprint.total_bytes
        if not fits(held, len(others) - len(chosen)):
            fixed = [r for r in [*others, *self.retiring] if r not in chosen]
            self.load_rejections += 1
            message = (f"model `{entry.id}` cannot load now: it needs {need / 2**20:.0f} MiB, and the "
                       f"{len(fixed)} pinned or busy model(s) hold {held / 2**20:.0f} MiB of the "
                       f"{(budget or 0) / 2**20:.0f} MiB residency budget"
                       + (f" (at most {max_models} models)" if max_models is not None else ""))
            self.last_load_rejection = message
            raise ModelLoadDeferred(message, DEFERRED_RETRY_S)
        for resident in chosen:
            log.info("unloading %s (least recently used) to make room for %s", resident.id, entry.id)
            self._retire(resident)
        self.close_retired()

    def _check_governor(self, entry: ModelEntry, need: int, held: list[Resident]) -> None:
        if self.governor is None:
            return
        from mlxcel.fleet.monitor import read_memory

        fixed = sum(r.footprint.total_bytes for r in held if r.busy or r.id in self.pinned)
        reason = self.governor.should_defer_load(need, fixed, read_memory())
        if reason is not None:
            self.load_rejections += 1
            self.last_load_rejection = f"model `{entry.id}` cannot load now: {reason}"
            raise ModelLoadDeferred(self.last_load_rejection, DEFERRED_RETRY_S)

    def _start_load(self, entry: ModelEntry, footprint: Footprint) -> Resident:
        host = ModelHost(host_config(self.base, entry))
        resident = Resident(entry, host, footprint)
        self.residents[entry.id] = resident
        self.failures.pop(entry.id, None)
        self.sleeping.discard(entry.id)
        self.events.status(entry.id, "loading")
        thread = threading.Thread(target=self._load, args=(resident,), name=f"mlxcel-load-{entry.id}", daemon=True)
        thread.start()
        return resident

    def _load(self, resident: Resident) -> None:
        with self._loading:
            if self._closed:
                resident.host.state = HostState.FAILED
                resident.host.error = "the server is shutting down"
                return
            started = time.monotonic()
            resident.host.start_loading(lambda reason: self._failed(resident, reason)).join()
            resident.loaded_at = time.monotonic()
        if resident.ready:
            if self.residents.get(resident.id) is resident:
                self.events.status(resident.id, "loaded")
            resident.footprint = resident.footprint.measured(resident.host)
            log.info("model %s resident after %.1fs (%d MiB)", resident.id, resident.loaded_at - started,
                     resident.footprint.total_bytes >> 20)

    def _failed(self, resident: Resident, reason: str) -> None:
        """A load or engine failure ends this model alone: the next request loads it again."""
        log.error("model %s failed: %s", resident.id, reason)
        with self._lock:
            self.failures[resident.id] = reason
            self._retire(resident)
        self.close_retired()

    # -- unloading ---------------------------------------------------------------------

    def _forget(self, resident: Resident, asleep: bool = False) -> None:
        if self.residents.get(resident.id) is resident:
            del self.residents[resident.id]
            if asleep:
                self.sleeping.add(resident.id)
                self.events.status(resident.id, "sleeping")
                return
            self.sleeping.discard(resident.id)
            failure = self.failures.get(resident.id) if resident.host.state is HostState.FAILED else None
            extra = {"failed": True, "exit_code": 1, "error": failure} if failure is not None else {"exit_code": 0}
            self.events.status(resident.id, "unloaded", **extra)

    def unload(self, model_id: str | None) -> list[str]:
        """POST /unload: the named model (ModelBusy while it streams), or every idle one.
        A sleeping model holds nothing already; unloading it ends its sleep, so a request
        no longer loads it without autoload (llama-server stops its sleeping child)."""
        with self._lock:
            if model_id is not None:
                entry = self.entry(model_id)
                resident = self.residents.get(entry.id)
                if resident is None:
                    return [entry.id] if self._end_sleep(entry.id) else []
                if resident.host.state is HostState.LOADING:
                    raise ModelBusy(f"model `{entry.id}` is loading; unload it once it is loaded", code="model_busy")
                if resident.busy:
                    raise ModelBusy(f"model `{entry.id}` is serving {max(resident.in_flight, resident.leases)} "
                                    "request(s); unload it once they finish", code="model_busy")
                chosen = [resident]
            else:
                chosen = [r for r in self.residents.values() if not r.busy]
            for resident in chosen:
                self._forget(resident)
            asleep = [name for name in sorted(self.sleeping) if self._end_sleep(name)] if model_id is None else []
        for resident in chosen:
            resident.host.close()
        if chosen:
            give_back_memory()
        return [r.id for r in chosen] + asleep

    def _end_sleep(self, model_id: str) -> bool:
        """The sleeping model `model_id` is unloaded from now (False if it was not asleep)."""
        if model_id not in self.sleeping or model_id in self.residents:
            return False
        self.sleeping.discard(model_id)
        self.events.status(model_id, "unloaded", exit_code=0)
        return True

    def load(self, model_id: str) -> Resident:
        """POST /models/load: the model's resident copy, its load started if it had none
        (ModelLoadDeferred when the budget leaves no room now)."""
        entry = self.entry(model_id)
        with self._lock:
            return self._resident_for(entry)

    def status(self, model_id: str) -> str:
        """llama-server's status of a model: loaded, loading, sleeping or unloaded."""
        resident = self.residents.get(model_id)
        if resident is None and model_id in self.sleeping:
            return "sleeping"
        if resident is None or resident.host.state is HostState.FAILED:
            return "unloaded"
        return "loaded" if resident.ready else "loading"

    def keep(self, model_id: str, keep: bool) -> Resident | None:
        """POST /v1/keep: mark the model kept, loading it if it is not resident, or release it."""
        entry = self.entry(model_id)
        with self._lock:
            resident = self.residents.get(entry.id)
            if keep and resident is None:
                resident = self._resident_for(entry)
            if resident is not None:
                resident.kept = keep
                resident.last_used = time.monotonic()
            return resident

    def expire_idle(self, now: float | None = None) -> list[str]:
        """Unload models idle past their timeout (not pinned, not kept), and put to sleep
        those idle past --sleep-idle-seconds (pinned ones too: a request wakes them)."""
        now = time.monotonic() if now is None else now
        expired, slept = [], []
        sleep_s = self.base.sleep_idle_seconds
        with self._lock:
            for resident in list(self.residents.values()):
                if resident.kept or resident.busy or not resident.ready or not resident.loaded_at:
                    continue
                ttl = resident.entry.ttl_s if resident.entry.ttl_s is not None else self.config.ttl_s
                idle = now - resident.idle_since  # not "since the request that loaded it"
                if ttl and resident.id not in self.pinned and idle >= ttl:
                    expired.append((resident, idle))
                    self._forget(resident)
                elif sleep_s > 0 and idle >= sleep_s:
                    slept.append((resident, idle))
                    self._forget(resident, asleep=True)
        for resident, idle in expired:
            log.info("unloading %s: idle for %.0fs", resident.id, idle)
            resident.host.close()
        for resident, idle in slept:
            log.info("%s is asleep: idle for %.0fs (--sleep-idle-seconds)", resident.id, idle)
            resident.host.close()
        self.close_retired()
        if expired or slept:
            give_back_memory()
        return [r.id for r, _ in expired]

    # -- reload and lifecycle -----------------------------------------------------------

    def reload(self, config: FleetConfig) -> dict:
        """Adopt a re-read config: residents whose entry kept its load keys stay loaded;
        the others unload once idle (no request in flight is dropped)."""
        kept, retired = [], []
        with self._lock:
            self.config = config
            self.pinned = {e.id for e in config.models.values() if e.pin}
            for resident in list(self.residents.values()):
                entry = config.models.get(resident.id)
                if entry is not None and entry.load_key() == resident.entry.load_key():
                    resident.entry = entry
                    kept.append(resident.id)
                    continue
                self._retire(resident)
                retired.append(resident.id)
        self.close_retired()
        for entry in config.models.values():
            metadata(entry.path)  # a new file's header read here, on the reload's thread, not by a request
        self.events.publish("*", "models_reload")
        for model_id in sorted(self.pinned):
            if model_id not in self.residents:
                self.preload(model_id)
        return {"status": "reloaded", "kept": sorted(kept), "unloaded": sorted(retired),
                "models": sorted(config.models)}

    def preload(self, model_id: str) -> None:
        try:
            self.load(model_id)
        except ModelLoadDeferred as exc:
            log.warning("not preloading %s: %s", model_id, exc.message)

    def start(self) -> None:
        """Load the pinned models, else the default one, then the preload list, in order;
        pull the configured catalog models not stored yet, in the background (a request
        never names what to download: only the file does)."""
        first = sorted(self.pinned) or ([self.default_id] if self.default_id else [])
        for model_id in [*first, *[m for m in self.config.preload if m not in first]]:
            self.preload(model_id)
        threading.Thread(target=self._pull_missing, name="mlxcel-pull", daemon=True).start()

    def _pull_missing(self) -> None:
        from mlxcel.models.catalog import CATALOG
        from mlxcel.models.pull import PullError, pull

        for entry in list(self.config.models.values()):
            metadata(entry.path)  # read each header once here, not on the event loop at a first request
        for entry in list(self.config.models.values()):
            if entry.path in CATALOG and metadata(entry.path) is None and not self._closed:
                try:
                    pull(entry.path, log=lambda line: log.info("%s", line))
                except (PullError, OSError) as exc:
                    log.warning("could not pull %s for %s: %s", entry.path, entry.id, exc)

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            residents = [*self.residents.values(), *self.retiring]
            self.residents.clear()
            self.retiring.clear()
        for resident in residents:
            resident.host.close()

    # -- views -----------------------------------------------------------------------

    def resident(self, model_id: str) -> Resident | None:
        return self.residents.get(model_id)

    def resident_list(self) -> list[Resident]:
        with self._lock:
            return list(self.residents.values())

    def any_host(self, prefer: str | None = None) -> ModelHost | None:
        """A ready host for the info routes: `prefer`'s, else the default model's, else any."""
        for model_id in (prefer, self.default_id):
            resident = self.residents.get(model_id) if model_id else None
            if resident is not None and resident.ready:
                return resident.host
        return next((r.host for r in self.resident_list() if r.ready), None)


def idle_sweeper(fleet: Fleet, interval: float = 1.0) -> Callable[[], asyncio.Task]:
    """A task that unloads idle models every `interval` seconds."""

    async def sweep() -> None:
        while True:
            await asyncio.sleep(interval)
            await asyncio.to_thread(fleet.expire_idle)

    return lambda: asyncio.get_running_loop().create_task(sweep())
