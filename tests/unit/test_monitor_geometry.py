"""The monitor reads a model's KV geometry (its GGUF header: ~0.2 s of parsing) off the
event loop only: what a route asks of it before then is none, never read in place."""

from __future__ import annotations

import asyncio
import threading

from mlxcel.fleet import monitor as monitor_module
from mlxcel.fleet.monitor import Served, ServerMonitor


class _Host:
    model_id = "m"


def test_geometry_is_read_on_a_worker_thread_and_never_by_a_route(monkeypatch):
    reads: list[threading.Thread] = []

    def read(host):
        reads.append(threading.current_thread())
        return 4096

    monkeypatch.setattr(monitor_module, "_kv_per_token", read)
    monitor = ServerMonitor(None, None, None)  # type: ignore[arg-type]
    host = _Host()
    monkeypatch.setattr(monitor, "served", lambda: [Served("m", host)])  # type: ignore[arg-type]
    assert monitor.kv_bytes_per_token(host) is None and monitor.table(host) is None  # type: ignore[arg-type]
    assert reads == []  # nothing parsed on the caller's (the event loop's) thread

    asyncio.run(monitor.learn_served())
    asyncio.run(monitor.learn_served())  # once per loaded model
    assert len(reads) == 1 and reads[0] is not threading.main_thread()
    assert monitor.kv_bytes_per_token(host) == 4096  # type: ignore[arg-type]
