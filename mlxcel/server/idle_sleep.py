"""--sleep-idle-seconds N: the model sleeps after N seconds without a request, as
llama-server's does. Asleep, it holds no weights, KV cache, compute buffers or host
prompt cache (ModelHost.sleep); the next request that needs it loads it again and
waits for that (ModelHost.wake), however many arrive together. Each model served
beside the chat model (an embedding model, a reranker, Whisper, a piper voice) sleeps
on its own clock, counted by the requests to its own routes (SleepPlan): embedding
traffic does not keep the chat model awake, nor chat traffic the embedding model.

What counts as a request is what llama-server counts: any request to a route, except
the ones that only describe the server (`GET /health`, `/props`, `/models`, `/metrics`
and their /v1 forms), which neither wake the model nor reset the idle clock, and
answer from what was read just before it slept. A path no route serves wakes nothing.
The model never sleeps while a request is open (from its first byte to its response's
last), while the engine still holds work (a resumable stream whose client left), or
while a background response runs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from mlxcel.engine.page_calls import give_back_memory

log = logging.getLogger("mlxcel.server")

DESCRIBING = frozenset({"/", "/health", "/v1/health", "/props", "/models", "/v1/models", "/metrics", "/v1/metrics"})


class Sleeper(Protocol):
    """The model that sleeps: the chat model's ModelHost, or with --embedding or
    --reranking (no chat model) the EmbeddingHost or RerankHost."""

    model_id: str
    asleep: dict

    @property
    def ready(self) -> bool: ...
    @property
    def sleeping(self) -> bool: ...
    @property
    def outstanding(self) -> int: ...
    def mark_sleeping(self) -> None: ...
    def sleep(self) -> None: ...
    def wake(self) -> bool: ...


class IdleSleep:
    """When the host sleeps and wakes. `describe` reads, on the event loop just before the
    host sleeps, what the describing routes answer while it is asleep (host.asleep);
    `held` says whether anything besides HTTP requests needs the model now."""

    def __init__(self, host: Sleeper, idle_s: float, describe: Callable[[], dict],
                 held: Callable[[], bool] = lambda: False) -> None:
        self.host, self.idle_s = host, idle_s
        self._describe, self._held = describe, held
        self.open_requests = 0
        self.last_request = time.monotonic()
        self.sleeps = self.wakes = 0
        self._turn: asyncio.Lock | None = None  # a sleep or a wake at a time

    @property
    def _lock(self) -> asyncio.Lock:
        if self._turn is None:
            self._turn = asyncio.Lock()
        return self._turn

    def _busy(self) -> bool:
        return self.open_requests > 0 or self.host.outstanding > 0 or self._held()

    async def opened(self) -> None:
        """A request that needs the model: it waits for a wake (its own or another's)."""
        self.open_requests += 1
        self.last_request = time.monotonic()
        if not self.host.sleeping and not self._lock.locked():
            return
        # shielded: a waiter that goes away (its client left) leaves the wake, and the turn, whole
        await asyncio.shield(self._wake())

    async def _wake(self) -> None:
        async with self._lock:
            if self.host.sleeping:
                self.wakes += 1
                await asyncio.to_thread(self.host.wake)

    def closed(self) -> None:
        self.open_requests -= 1
        self.last_request = time.monotonic()

    async def sleep_if_idle(self, now: float | None = None) -> bool:
        """Put the host to sleep when it is ready, idle and unused for idle_s: True if it slept.
        While it is not ready (loading, waking, asleep) the idle time starts again, so it
        counts from when the host is ready: a model slower to load than idle_s does not
        sleep the moment it is."""
        now = time.monotonic() if now is None else now
        if not self.host.ready:
            self.last_request = max(self.last_request, now)
            return False
        if not self._due(now):
            return False
        async with self._lock:
            if not self._due(now):  # a request came while the lock was taken
                return False
            self.host.asleep = self._describe()
            self.host.mark_sleeping()  # the describing routes answer host.asleep from now
            self.sleeps += 1
            await asyncio.to_thread(self._sleep_host)
        return True

    def _sleep_host(self) -> None:
        self.host.sleep()
        give_back_memory()  # what the model's objects held goes back to the kernel

    def _due(self, now: float) -> bool:
        return (self.host.ready and not self._busy()
                and now - self.last_request >= self.idle_s)

    async def watch(self) -> None:
        """The lifespan's task: look often enough to sleep within a second of the deadline."""
        interval = min(1.0, max(0.05, self.idle_s / 4))
        while True:
            await asyncio.sleep(interval)
            try:
                await self.sleep_if_idle()
            except Exception:  # noqa: BLE001 - a failed sleep leaves the model awake; try again later
                log.exception("model %s could not be put to sleep", self.host.model_id)


@dataclass
class SleepPlan:
    """Which model sleeps for which requests: `main` (the chat model, or the model of an
    --embedding or --reranking server) for every route that needs a model, except the
    paths in `beside`, each served by a model of its own that sleeps alone. With many
    chat models (--config, --models-dir) the fleet puts them to sleep and there is no
    `main`: only the models beside them sleep here."""

    main: IdleSleep | None
    beside: dict[str, IdleSleep] = field(default_factory=dict)

    @property
    def sleepers(self) -> list[IdleSleep]:
        return [*([self.main] if self.main is not None else []), *dict.fromkeys(self.beside.values())]

    def for_path(self, path: str) -> IdleSleep | None:
        return self.beside.get(path, self.main)


class IdleSleepMiddleware:
    """Counts the requests that need a model, waking it for each while it sleeps."""

    def __init__(self, app: ASGIApp, plan: SleepPlan, routes: Callable[[], list],
                 describing: frozenset[str] = frozenset(), modelless: frozenset[str] = frozenset()) -> None:
        """`describing`: more paths that only describe the server (Vertex AI's health route);
        `modelless`: paths answered without a model, whatever the method (the routes of
        features mlxcel does not serve)."""
        self.app, self.plan, self._routes = app, plan, routes
        self._describing = DESCRIBING | describing
        self._modelless = modelless

    def _sleeper_for(self, scope: Scope) -> IdleSleep | None:
        """The sleeper of the model this request needs; None where it needs none."""
        path = scope["path"].rstrip("/") or "/"
        if path in self._modelless or (scope["method"] in ("GET", "HEAD") and path in self._describing):
            return None
        if self.plan.main is None and path not in self.plan.beside:  # the fleet's models wake themselves
            return None
        if not any(route.matches(scope)[0] is Match.FULL for route in self._routes()):
            return None
        return self.plan.for_path(path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sleeper = self._sleeper_for(scope) if scope["type"] == "http" else None
        if sleeper is None:
            await self.app(scope, receive, send)
            return
        try:
            await sleeper.opened()  # counts the request before its first await
            await self.app(scope, receive, send)
        finally:
            sleeper.closed()


@contextlib.asynccontextmanager
async def watching(plan: SleepPlan | None):
    """Run each sleeper's watch for the server's life (nothing without a plan)."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(sleeper.watch(), name=f"idle-sleep-{sleeper.host.model_id}")
             for sleeper in (plan.sleepers if plan is not None else [])]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
