"""Wake-ups of other threads that the engine thread holds back until it is about to
release the GIL for a decode.

An event handed to an event loop wakes the loop's thread. Woken while the engine
thread still runs Python (sampling the rest of the batch, planning the next one),
the loop thread takes the GIL at the engine's next ctypes call and keeps it for its
whole turn, while the engine, and with it both compute cores, waits. Woken just
before `llama_decode`, it runs its turn beside the decode, where it takes one core
for a while instead of stopping both.

Only the thread that holds defers; a wake-up from any other thread goes at once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger(__name__)
_local = threading.local()


@contextmanager
def holding() -> Iterator[None]:
    """Hold this thread's wake-ups; all of them go out when the block ends, however
    it ends. A nested hold is part of the outer one."""
    if getattr(_local, "pending", None) is not None:
        yield
        return
    _local.pending = []
    try:
        yield
    finally:
        try:
            release()
        finally:
            _local.pending = None


def defer(wake: Callable[[], None]) -> bool:
    """Keep `wake` for the next release when this thread holds (True); otherwise the
    caller wakes now (False)."""
    pending = getattr(_local, "pending", None)
    if pending is None:
        return False
    pending.append(wake)
    return True


def release() -> None:
    """Send every wake-up held so far (the hold goes on). One that fails is logged:
    it must neither keep back the others nor stop the engine thread."""
    pending = getattr(_local, "pending", None)
    if not pending:
        return
    _local.pending = []
    for wake in pending:
        try:
            wake()
        except Exception:  # noqa: BLE001
            log.exception("a held wake-up failed")
