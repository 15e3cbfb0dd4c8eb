"""In-memory stores with an entry cap, a rough byte budget and a time to live,
evicting the least recently used entry first. A cap of 0 entries disables a store;
a byte budget of 0 keeps it answering but evicts every entry at once. A lock guards
each call: requests are prepared on worker threads while the event loop records."""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

Value = TypeVar("Value")


def json_size(*values: Any) -> int:
    """The rough byte size the budgets count: the values' compact JSON."""
    return sum(len(json.dumps(v, ensure_ascii=False, separators=(",", ":"))) for v in values)


@dataclass
class _Entry(Generic[Value]):
    value: Value
    size: int
    expires_at: float | None


class BoundedStore(Generic[Value]):
    def __init__(self, max_entries: int, max_bytes: int, ttl_secs: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl_secs = ttl_secs
        self._clock = clock
        self._entries: OrderedDict[str, _Entry[Value]] = OrderedDict()  # least recently used first
        self._lock = threading.RLock()
        self.bytes = 0

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def put(self, key: str, value: Value, size: int, ttl_secs: float | None = None) -> bool:
        """Store (or replace) an entry as the most recently used; False, and the store
        unchanged, when it is off or the entry alone exceeds the byte budget."""
        with self._lock:
            if not self.enabled or size > self.max_bytes:
                return False
            self.pop(key)
            ttl = self.ttl_secs if ttl_secs is None else ttl_secs
            self._entries[key] = _Entry(value, size, self._clock() + ttl if ttl > 0 else None)
            self.bytes += size
            self._evict()
            return key in self._entries

    def get(self, key: str) -> Value | None:
        """The entry's value, marked most recently used; None when absent or expired."""
        with self._lock:
            entry = self._live(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry.value

    def peek(self, key: str) -> Value | None:
        with self._lock:
            entry = self._live(key)
            return None if entry is None else entry.value

    def pop(self, key: str) -> Value | None:
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return None
            self.bytes -= entry.size
            return entry.value

    def keys(self) -> Iterator[str]:
        """Live keys, least recently used first."""
        with self._lock:
            self._expire()
            return iter(list(self._entries))

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._entries)

    def __contains__(self, key: str) -> bool:
        with self._lock:
            return self._live(key) is not None

    def _live(self, key: str) -> _Entry[Value] | None:
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
            key = next(iter(self._entries))
            self.pop(key)
