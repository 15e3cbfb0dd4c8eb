"""/health's latency sampled while other work runs against the same server: the
tests' check that the work stays off the event loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def health_latencies_while(server, work: list[Callable[[], T]],
                           interval_s: float = 0.01) -> tuple[list[float], list[T]]:
    """Run each callable of `work` on a thread of its own and time /health, one request
    after another on one open connection, until all have returned. Returns the latencies
    and the callables' results, in the order they finished. A callable that raises fails
    the caller with its exception."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run(job: Callable[[], T]) -> None:
        try:
            results.append(job())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            errors.append(exc)

    latencies: list[float] = []
    with server.client(timeout=60) as client:
        assert client.get("/health").status_code == 200  # the connection is open before the work starts
        threads = [threading.Thread(target=run, args=(job,)) for job in work]
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            started = time.monotonic()
            assert client.get("/health").status_code == 200
            latencies.append(time.monotonic() - started)
            time.sleep(interval_s)
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return latencies, results
