"""Stores in this process's memory, for unit tests of pure logic: values are kept
as given (not copied). Two stores of one name on one backend share their entries."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlxcel.state.store import BoundedStore, StateBackend


@dataclass
class _Entry:
    value: Any
    size: int
    expires_at: float | None


@dataclass
class _Shared:
    entries: OrderedDict[str, _Entry] = field(default_factory=OrderedDict)  # least recently used first
    lock: threading.RLock = field(default_factory=threading.RLock)
    bytes: int = 0


class MemoryStore(BoundedStore):
    def __init__(self, name: str, max_entries: int, max_bytes: int, ttl_secs: float,
                 clock: Callable[[], float] = time.monotonic, shared: _Shared | None = None) -> None:
        super().__init__(name, max_entries, max_bytes, ttl_secs)
        self._clock = clock
        self._shared = shared or _Shared()
        self._entries = self._shared.entries
        self._lock = self._shared.lock

    @property
    def bytes(self) -> int:
        return self._shared.bytes

    def put(self, key: str, value: Any, size: int, ttl_secs: float | None = None) -> bool:
        with self._lock:
            if not self._accepts(size):
                return False
            self.pop(key)
            ttl = self._ttl(ttl_secs)
            self._entries[key] = _Entry(value, size, self._clock() + ttl if ttl > 0 else None)
            self._shared.bytes += size
            self._evict()
            return key in self._entries

    def update(self, key: str, change: Callable[[Any | None], tuple[Any, int] | None]) -> bool:
        with self._lock:
            new = change(self.peek(key))
            return new is not None and self.put(key, *new)

    def get(self, key: str) -> Any | None:
        with self._lock:
            entry = self._live(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry.value

    def peek(self, key: str) -> Any | None:
        with self._lock:
            entry = self._live(key)
            return None if entry is None else entry.value

    def pop(self, key: str) -> Any | None:
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return None
            self._shared.bytes -= entry.size
            return entry.value

    def keys(self) -> list[str]:
        with self._lock:
            self._expire()
            return list(self._entries)

    def _live(self, key: str) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is not None and entry.expires_at is not None and entry.expires_at <= self._clock():
            self.pop(key)
            return None
        return entry

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, e in self._entries.items() if e.expires_at is not None and e.expires_at <= now]:
            self.pop(key)

    def _evict(self) -> None:
        self._expire()
        while self._entries and (len(self._entries) > self.max_entries or self.bytes > self.max_bytes):
            self.pop(next(iter(self._entries)))


class MemoryBackend(StateBackend):
    description = "memory (this process only)"

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._shared: dict[str, _Shared] = {}

    def store(self, name: str, max_entries: int, max_bytes: int, ttl_secs: float) -> MemoryStore:
        shared = self._shared.setdefault(name, _Shared())
        return MemoryStore(name, max_entries, max_bytes, ttl_secs, self._clock, shared)
