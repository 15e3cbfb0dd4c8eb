"""Whether a timing was taken with the cores to itself: the process's CPU time against
wall time × the compute threads. llama.cpp's threads spin, so with the cores to
themselves they use nearly all of them; below MIN_CORE_SHARE other work held the cores,
and timings taken then (a busy host, another server starting) have the wrong shape."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

MIN_CORE_SHARE = 0.8


class Contended(RuntimeError):
    """What was timed ran while other work held the cores."""


@contextmanager
def uncontended(threads: int, what: str):
    """Run the block's timings; raise `Contended`, naming `what`, when its compute
    threads had under MIN_CORE_SHARE of their cores meanwhile."""
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    share = cpu / (wall * max(1, min(threads, os.cpu_count() or 1))) if wall > 0 else 1.0
    if share < MIN_CORE_SHARE:
        raise Contended(f"the compute threads had {share:.0%} of their cores while {what} (other work held them)")
