"""Engine threads hand events to an event loop through one relay per loop: whatever
arrives before the loop gets to it is delivered by one wake-up. A decode step that
yields a token on each of 16 slots wakes the loop once, not 16 times; each wake-up
is a write to the loop's self-pipe, which also pre-empts the engine thread on a
machine whose cores are all busy decoding. The engine thread sends its wake-ups just
before it decodes (engine/held_wakeups.py)."""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

from mlxcel.engine import held_wakeups

log = logging.getLogger(__name__)
_relays: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopRelay] = weakref.WeakKeyDictionary()
_relays_lock = threading.Lock()


class LoopRelay:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # the registry's value must not keep its key alive
        self._lock = threading.Lock()
        self._pending: collections.deque[tuple[Callable[[Any], Any], Any]] = collections.deque()
        self._scheduled = False

    def call(self, callback: Callable[[Any], Any], argument: Any) -> None:
        """Run `callback(argument)` on the loop, in the order of calls from any
        thread. Dropped once the loop is closed: nobody is listening any more."""
        loop = self._loop()
        with self._lock:
            if self._scheduled and (loop is None or loop.is_closed()):
                self._pending.clear()  # closed with a delivery pending: it never runs
                self._scheduled = False
            self._pending.append((callback, argument))
            if self._scheduled:
                return
            self._scheduled = True
        if not held_wakeups.defer(self._wake):  # the engine thread wakes the loop just before it decodes
            self._wake()

    def _wake(self) -> None:
        loop = self._loop()
        try:
            if loop is None:
                raise RuntimeError("the loop is gone")
            loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop is closed
            with self._lock:
                self._pending.clear()
                self._scheduled = False

    def _deliver(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, collections.deque()
            self._scheduled = False
        for callback, argument in batch:
            try:
                callback(argument)
            except Exception:  # one listener's failure must not lose the others' events
                log.exception("an engine event's callback failed")


def relay_for(loop: asyncio.AbstractEventLoop) -> LoopRelay:
    with _relays_lock:
        relay = _relays.get(loop)
        if relay is None:
            relay = _relays[loop] = LoopRelay(loop)
        return relay
