"""One process-wide gate through which the engines of one process take turns computing.

Why it exists: llama.cpp's CPU threads spin while they wait for each other, so two
llama contexts computing at once on a machine with as many cores as one context has
threads leave each thread waiting for a peer that is not running. Two model servers
(two processes) on the 2 cores here made each 4x slower.

When it gates (measured with bench/engines_shared.py; figures in bench/README.md):
not when llama.cpp's CPU backend runs on OpenMP, as the wheel built here does.
libgomp sees every thread of its process and, once they outnumber the cores, waits at
its barriers by sleeping instead of spinning: two contexts in one process computing
at once then do not thrash, and one's Python work overlaps the other's compute (both
busy, the machine did 1.10-1.15x the useful work of one model alone; gated
0.98-1.01x). Gating by steps also stalls one model for a whole prefill step of the
other (1 tok/s during an 870-token prefill, against 87 ungated). A build with ggml's
own thread pool spins at its barriers whatever else runs: there the gate is on.
MLXCEL_COMPUTE_GATE=1 or 0 forces it either way.

How it gates: each engine holds the gate around one step's compute (admission, which
may restore a saved state, its decodes and the drafter's, and the logits reads and
sampling that follow). Waiters are served strictly in arrival order and a release
hands the gate straight to the oldest waiter, so two busy engines alternate step by
step and neither starves. Holding is reentrant on one thread. With fewer than two
participants (`join`ed engines) `hold` does nothing, so a single-model server pays
nothing; uncontended it costs about a microsecond.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from contextlib import contextmanager


class ComputeGate:
    def __init__(self, enabled: bool | None = True) -> None:
        """`enabled` None: decided when the first engine joins (see `gate_by_default`)."""
        self._guard = threading.Lock()  # protects everything below
        self._holder: int | None = None  # thread ident
        self._depth = 0
        self._waiters: deque[tuple[int, threading.Lock]] = deque()
        self._participants = 0
        self.enabled = enabled  # False: never gate; None: not decided yet
        self.handoffs = 0  # releases that passed the gate to a waiter
        self.waits = 0  # acquisitions that had to wait

    # -- participants -----------------------------------------------------------------

    def join(self) -> None:
        """An engine that computes now exists (called when its thread starts)."""
        with self._guard:
            if self.enabled is None:
                self.enabled = gate_by_default()
            self._participants += 1

    def leave(self) -> None:
        with self._guard:
            self._participants = max(0, self._participants - 1)

    @property
    def participants(self) -> int:
        return self._participants

    @property
    def active(self) -> bool:
        """Whether `hold` gates now."""
        return bool(self.enabled) and self._participants >= 2

    # -- holding ----------------------------------------------------------------------

    def acquire(self) -> None:
        me = threading.get_ident()
        with self._guard:
            if self._holder is None:
                self._holder, self._depth = me, 1
                return
            if self._holder == me:
                self._depth += 1
                return
            turn = threading.Lock()
            turn.acquire()
            self._waiters.append((me, turn))
            self.waits += 1
        turn.acquire()  # released by the holder once the gate is ours

    def release(self) -> None:
        me = threading.get_ident()
        with self._guard:
            if self._holder != me:
                raise RuntimeError("the compute gate is not held by this thread")
            self._depth -= 1
            if self._depth:
                return
            if self._waiters:
                self._holder, turn = self._waiters.popleft()
                self._depth = 1
                self.handoffs += 1
                turn.release()
            else:
                self._holder = None

    @contextmanager
    def hold(self, guest: bool = False):
        """Hold the gate for the block, when gating is active (decided once, on entry).
        `guest`: the caller computes without being a participant (a model's warm-up or
        cost measurement while it loads): it gates as soon as one engine runs."""
        if not self.enabled or self._participants + guest < 2:  # (None: no engine joined yet)
            yield
            return
        self.acquire()
        try:
            yield
        finally:
            self.release()

    def held_by_me(self) -> bool:
        return self._holder == threading.get_ident()

    def waiting(self) -> int:
        return len(self._waiters)


GATE_ENV = "MLXCEL_COMPUTE_GATE"  # "1": always gate, "0": never; unset or "auto": see gate_by_default


def gate_by_default() -> bool:
    """Gate unless llama.cpp's CPU backend runs on OpenMP (see the module's docstring)."""
    import llama_cpp  # here, not at import: the gate's users need not load llama.cpp

    info = llama_cpp.llama_print_system_info()
    info = info.decode("utf-8", errors="replace") if isinstance(info, bytes) else str(info)
    return "OPENMP = 1" not in info


def _from_env() -> bool | None:
    value = os.environ.get(GATE_ENV, "auto").strip().lower()
    if value in ("1", "true", "on"):
        return True
    if value in ("0", "false", "off"):
        return False
    return None


COMPUTE_GATE = ComputeGate(enabled=_from_env())  # the one every engine in this process shares
