"""The interface every backend implements: named stores with an entry cap, a rough
byte budget and a time to live, evicting the least recently used entry first.

A cap of 0 entries disables a store (put answers False, nothing is kept); a byte
budget of 0 keeps it answering but evicts every entry at once. `get` marks an entry
most recently used, `peek` does not. Values are JSON (dicts, lists, strings,
numbers); the memory backend hands back the very object it was given. A backend that
cannot be reached or written (Redis gone, slow or refusing its password; a SQLite file
locked past the busy timeout or on a full disk) raises StateUnavailable, whatever the
operation, so the HTTP edge answers 503 rather than a 500 with a traceback."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

UNBOUNDED = 1 << 62  # an entry cap or byte budget that never evicts


class StateUnavailable(RuntimeError):
    """The backend cannot be reached, opened or written now (the message names it, never
    a password): at start the server stops with it in one line; on a request it is a 503."""

    code = "state_store_unavailable"


def json_size(*values: Any) -> int:
    """The rough byte size the budgets count: the values' compact JSON."""
    return sum(len(json.dumps(v, ensure_ascii=False, separators=(",", ":"))) for v in values)


def encode(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class BoundedStore(ABC):
    def __init__(self, name: str, max_entries: int, max_bytes: int, ttl_secs: float) -> None:
        self.name = name
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl_secs = ttl_secs

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def _accepts(self, size: int) -> bool:
        return self.enabled and size <= self.max_bytes

    def _ttl(self, ttl_secs: float | None) -> float:
        return self.ttl_secs if ttl_secs is None else ttl_secs

    @abstractmethod
    def put(self, key: str, value: Any, size: int, ttl_secs: float | None = None) -> bool:
        """Store (or replace) an entry as the most recently used; False, and the store
        unchanged, when it is off or the entry alone exceeds the byte budget."""

    @abstractmethod
    def update(self, key: str, change: Callable[[Any | None], tuple[Any, int] | None]) -> bool:
        """Read the entry (as peek does; None when absent) and store `change`'s (value,
        size) in its place, as put does, with no other process's write between: a
        read-then-write that two servers may do at once. `change` may be called again
        (a write of another process came between); it returns None to write nothing,
        or raises, which leaves the entry as it was."""

    @abstractmethod
    def get(self, key: str) -> Any | None:
        """The entry's value, marked most recently used; None when absent or expired."""

    @abstractmethod
    def peek(self, key: str) -> Any | None:
        """The entry's value, its place in the LRU order unchanged."""

    @abstractmethod
    def pop(self, key: str) -> Any | None:
        """Remove an entry; its value, or None when there was none."""

    @abstractmethod
    def keys(self) -> list[str]:
        """Live keys, least recently used first."""

    @property
    @abstractmethod
    def bytes(self) -> int:
        """The sizes of the entries held, summed."""

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: str) -> bool:
        return self.peek(key) is not None


class StateBackend(ABC):
    description = ""  # for the start-up log: which backend, and where (never a password)

    @abstractmethod
    def store(self, name: str, max_entries: int, max_bytes: int, ttl_secs: float) -> BoundedStore:
        """The store `name`; every process on the same backend sees the same entries."""

    def close(self) -> None:
        pass
