"""The host-RAM prompt cache: sequence KV states saved out of the slots, keyed by
chained sha256 hashes of 16-token blocks, so a request can restore the longest
cached prefix of its prompt into whichever slot it gets.

Entry key = the hash chain up to the entry's last block: h_0 = sha256(salt || block_0),
h_i = sha256(h_{i-1} || block_i). The salt names what else the KV was computed under
(the LoRA adapters' scales, engine/lora.py; empty without adapters), so a state is only
ever found for the same tokens computed the same way. Every chain hash of an entry is indexed, so a
lookup (which hashes the prompt's full blocks once) finds the entry sharing the
longest block prefix with the prompt, even when the entry goes on past it. Bounded by bytes and
entries, with a TTL, LRU eviction and rejection of entries larger than the cap.
Shared between the engine thread (lookup, insert) and HTTP handlers (stats, reset).
"""

from __future__ import annotations

import hashlib
import threading
import time
from array import array
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

BLOCK_SIZE = 16


def block_hashes(tokens: list[int], block_size: int = BLOCK_SIZE, salt: bytes = b"") -> list[bytes]:
    """Chained hashes of every full block of `tokens`, the chain started by `salt`."""
    hashes: list[bytes] = []
    previous = salt
    for start in range(0, len(tokens) - block_size + 1, block_size):
        digest = hashlib.sha256(previous + array("i", tokens[start : start + block_size]).tobytes()).digest()
        hashes.append(digest)
        previous = digest
    return hashes


@dataclass
class CacheEntry:
    tokens: list[int]  # the saved sequence, exactly
    state: np.ndarray  # llama_state_seq_get_data of a sequence holding `tokens`
    created: float
    last_used: float
    salt: bytes = b""  # what its chain hashes start from
    n_blocks: int = field(init=False)

    def __post_init__(self) -> None:
        self.n_blocks = len(self.tokens) // BLOCK_SIZE


@dataclass
class CacheCounters:
    hits: int = 0
    lookups: int = 0
    inserts: int = 0
    evictions_lru: int = 0
    evictions_ttl: int = 0
    rejections_oversized: int = 0
    superseded: int = 0  # entries dropped because a longer one holding all their tokens came


class HostPromptCache:
    def __init__(self, capacity_bytes: int, max_entries: int, ttl_seconds: float) -> None:
        self.capacity_bytes = capacity_bytes
        self.max_entries = max_entries
        self.ttl_seconds = ttl_seconds
        self._entries: OrderedDict[bytes, CacheEntry] = OrderedDict()  # LRU first
        self._blocks: dict[bytes, bytes] = {}  # chain hash -> key of an entry holding it
        self._bytes = 0
        self._lock = threading.Lock()
        self._reset_at = float("-inf")  # time.monotonic() of the last reset
        self.counters = CacheCounters()

    # -- engine side ------------------------------------------------------------------

    def lookup(self, prompt: list[int], salt: bytes = b"") -> tuple[CacheEntry, int] | None:
        """The entry of `salt` sharing the longest block prefix with `prompt`, and the
        length of that prefix in tokens (the entry and the prompt may share a few
        tokens more); None on a miss."""
        hashes = block_hashes(prompt, salt=salt)
        with self._lock:
            self.counters.lookups += 1
            self._expire(time.monotonic())
            for depth in range(len(hashes), 0, -1):
                key = self._blocks.get(hashes[depth - 1])
                if key is not None:
                    entry = self._entries[key]
                    entry.last_used = time.monotonic()
                    self._entries.move_to_end(key)
                    self.counters.hits += 1
                    return entry, depth * BLOCK_SIZE
        return None

    def covered(self, tokens: list[int], salt: bytes = b"") -> int:
        """How many leading tokens of `tokens` an entry of `salt` holds, in whole
        blocks (no counters, no LRU update: this is not a lookup on a request's behalf)."""
        hashes = block_hashes(tokens, salt=salt)
        with self._lock:
            for depth in range(len(hashes), 0, -1):
                if hashes[depth - 1] in self._blocks:
                    return depth * BLOCK_SIZE
        return 0

    def insert(self, tokens: list[int], state: np.ndarray, made_at: float | None = None, salt: bytes = b"") -> bool:
        """Store `state` for `tokens`, found by the hashes of its whole blocks. False
        when the entry alone exceeds the capacity, or when the tokens were computed
        (`made_at`, time.monotonic()) before a reset: a reset clears what the slots
        had not yet saved too, however late the engine gets round to saving it."""
        hashes = block_hashes(tokens, salt=salt)
        if not hashes:
            return False
        now = time.monotonic()
        with self._lock:
            if made_at is not None and made_at <= self._reset_at:
                return False
            if len(state) > self.capacity_bytes:
                self.counters.rejections_oversized += 1
                return False
            key = hashes[-1]
            if key in self._entries:
                self._drop(key)
            self._drop_superseded(tokens, hashes)
            self._expire(now)
            while self._entries and (
                self._bytes + len(state) > self.capacity_bytes or len(self._entries) >= self.max_entries
            ):
                self._drop(next(iter(self._entries)))
                self.counters.evictions_lru += 1
            self._entries[key] = CacheEntry(list(tokens), state, now, now, salt)
            for digest in hashes:
                self._blocks[digest] = key
            self._bytes += len(state)
            self.counters.inserts += 1
            return True

    def _drop_superseded(self, tokens: list[int], hashes: list[bytes]) -> None:
        """Drop the entries whose tokens are a prefix of `tokens`: the new entry serves
        every lookup they would (a conversation saved turn after turn keeps one entry)."""
        for digest in hashes[:-1]:
            entry = self._entries.get(digest)
            if entry is not None and tokens[: len(entry.tokens)] == entry.tokens:
                self._drop(digest)
                self.counters.superseded += 1

    def _drop(self, key: bytes) -> None:
        entry = self._entries.pop(key)
        self._bytes -= len(entry.state)
        for digest in block_hashes(entry.tokens, salt=entry.salt):
            if self._blocks.get(digest) == key:
                del self._blocks[digest]

    def _expire(self, now: float) -> None:
        if self.ttl_seconds <= 0:
            return
        for key in [k for k, e in self._entries.items() if now - e.last_used > self.ttl_seconds]:
            self._drop(key)
            self.counters.evictions_ttl += 1

    # -- HTTP side --------------------------------------------------------------------

    def stats(self) -> dict:
        with self._lock:
            self._expire(time.monotonic())
            c = self.counters
            blocks = sum(e.n_blocks for e in self._entries.values())
            unique = len(self._blocks)
            return {
                "enabled": True,
                "apc_enabled": False,
                "block_size": BLOCK_SIZE,
                "hash": "sha256",
                "entries": len(self._entries),
                "bytes": self._bytes,
                "capacity_bytes": self.capacity_bytes,
                "max_entries": self.max_entries,
                "hits": c.hits,
                "lookups": c.lookups,
                "hit_rate": c.hits / c.lookups if c.lookups else 0.0,
                "inserts": c.inserts,
                "evictions_lru": c.evictions_lru,
                "evictions_ttl": c.evictions_ttl,
                "rejections_oversized": c.rejections_oversized,
                "superseded": c.superseded,
                "total_blocks_stored": blocks,
                "unique_block_hashes": unique,
                "apc_active_entries": 0,
            }

    def reset(self) -> dict:
        """Drop every entry; returns the snapshot of what was freed."""
        with self._lock:
            self._reset_at = time.monotonic()
            freed = {"entries": len(self._entries), "bytes": self._bytes}
            self._entries.clear()
            self._blocks.clear()
            self._bytes = 0
        return freed


def disabled_stats() -> dict:
    return {
        "enabled": False, "apc_enabled": False, "block_size": BLOCK_SIZE, "hash": "sha256", "entries": 0,
        "bytes": 0, "capacity_bytes": 0, "max_entries": 0, "hits": 0, "lookups": 0, "hit_rate": 0.0,
        "inserts": 0, "evictions_lru": 0, "evictions_ttl": 0, "rejections_oversized": 0, "superseded": 0,
        "total_blocks_stored": 0, "unique_block_hashes": 0, "apc_active_entries": 0,
    }
