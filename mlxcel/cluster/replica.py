"""One engine replica: a whole single-process mlxcel (its ASGI application, model,
engine thread and llama context) inside a Ray Serve replica actor. The gateway
plays HTTP requests into it (`serve_http`); the router reads what it holds from
`record_routing_stats`."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator

from mlxcel.cluster.prompt_keys import digests, held_digests, prompt_tokens
from mlxcel.config import ServerConfig
from mlxcel.http.envelope import HttpEnvelope, ResponseStart, play
from mlxcel.observability.log_setup import configure_logging

log = logging.getLogger("mlxcel.cluster")
LOAD_TIMEOUT_S = 600


def replica_name() -> str:
    from ray import serve

    try:
        return serve.get_replica_context().replica_id.unique_id
    except Exception:  # noqa: BLE001 - outside a replica (unit tests)
        return "local"


class EngineReplica:
    async def __init__(self, config: ServerConfig) -> None:
        from mlxcel.server.app import create_app

        configure_logging(config.log, config.verbose)
        self.config = config
        self.name = replica_name()
        self._failures: list[str] = []
        self.app = create_app(config, self._failures.append)
        self._lifespan = self.app.router.lifespan_context(self.app)
        await self._lifespan.__aenter__()
        self.host = self.app.state.host
        started = time.monotonic()
        while not self.host.ready and not self._failures and time.monotonic() - started < LOAD_TIMEOUT_S:
            await asyncio.sleep(0.05)
        if self._failures or not self.host.ready:
            reason = self._failures[0] if self._failures else "the model did not load in time"
            await self._lifespan.__aexit__(None, None, None)
            raise RuntimeError(f"replica {self.name}: {reason}")
        log.info("replica %s ready: %s, %d threads, %d slots", self.name, config.model, config.threads,
                 config.parallel)

    async def serve_http(self, envelope: HttpEnvelope, prompt_digests: list[int] | None = None,
                         replica: str | None = None) -> AsyncIterator[ResponseStart | bytes]:
        """The replica's answer to `envelope`, as parts (`prompt_digests` and `replica`, a
        pin to this replica, are the router's);
        the answer names the replica in an `x-mlxcel-replica` header."""
        async for part in play(self.app, envelope):
            if isinstance(part, ResponseStart):
                part.headers.append((b"x-mlxcel-replica", self.name.encode()))
            yield part

    async def prompt_digests(self, envelope: HttpEnvelope) -> list[int] | None:
        tokens = await asyncio.to_thread(prompt_tokens, self.app, envelope)
        return None if tokens is None else digests(tokens)

    async def call(self, envelope: HttpEnvelope, replica: str | None = None) -> tuple[int, bytes]:
        """A whole answer at once (the gateway's fan-out to every replica: /health, /metrics)."""
        status, chunks = 503, []
        async for part in play(self.app, envelope):
            if isinstance(part, ResponseStart):
                status = part.status
            else:
                chunks.append(part)
        return status, b"".join(chunks)

    def record_routing_stats(self) -> dict:
        host = self.host
        engine = host.engine if host.ready else None
        snapshot = engine.snapshot if engine is not None else None
        return {
            "replica": self.name,
            "pid": os.getpid(),
            "ready": engine is not None and engine.alive,
            "held": held_digests(host) if engine is not None else [],
            "waiting": snapshot.queue_depth if snapshot is not None else 0,
            "busy": snapshot.n_busy if snapshot is not None else 0,
            "slots": self.config.parallel,
            "at": time.time(),  # when it was taken: the router ignores a report older than a finish it saw
        }

    def check_health(self) -> None:
        """Ray restarts a replica whose engine died."""
        engine = self.host.engine
        if self.host.failed or engine is None or not engine.alive:
            raise RuntimeError(f"replica {self.name}: the engine is not running ({self.host.error or 'stopped'})")

    async def __del__(self) -> None:
        await self._lifespan.__aexit__(None, None, None)
