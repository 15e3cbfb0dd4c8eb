"""Pure logic of the host prompt cache."""

from __future__ import annotations

import time

from mlxcel.engine.prompt_cache import BLOCK_SIZE, HostPromptCache, block_hashes


def test_block_hashes_chain_and_ignore_partial_blocks():
    tokens = list(range(40))
    hashes = block_hashes(tokens)
    assert len(hashes) == 2
    assert block_hashes(tokens[:32]) == hashes
    assert block_hashes([99] + tokens[1:40])[0] != hashes[0]
    assert block_hashes([99] + tokens[1:40])[1] != hashes[1]  # a change early changes every later hash


def test_lookup_finds_the_longest_cached_prefix():
    cache = HostPromptCache(capacity_bytes=10_000, max_entries=10, ttl_seconds=0)
    base = list(range(64))
    cache.insert(base[:32], b"x" * 10)
    cache.insert(base[:48], b"y" * 10)
    entry, n = cache.lookup(base + [1, 2, 3])
    assert entry.tokens == base[:48] and entry.state == b"y" * 10 and n == 48
    assert cache.lookup([5] * 40) is None
    # an entry that goes on past the shared prefix still serves it
    entry, n = cache.lookup(base[:40] + [7] * 30)
    assert n == 32 and entry.tokens[:32] == base[:32]
    stats = cache.stats()  # the 32-token entry was superseded by the 48-token one holding all of it
    assert (stats["hits"], stats["lookups"], stats["entries"], stats["bytes"]) == (2, 3, 1, 10)
    assert stats["total_blocks_stored"] == 3 and stats["unique_block_hashes"] == 3 and stats["superseded"] == 1


def test_a_longer_entry_supersedes_its_prefixes_but_not_its_siblings():
    cache = HostPromptCache(capacity_bytes=10_000, max_entries=10, ttl_seconds=0)
    system = list(range(40))  # two full blocks and a partial one
    cache.insert(system, b"s" * 10)
    cache.insert(system + [900] * 30, b"a" * 20)  # conversation A, turn 1: holds all of `system`
    cache.insert(system[:35] + [901] * 30, b"b" * 20)  # B diverges inside the partial block: a sibling
    assert cache.stats()["entries"] == 2 and cache.stats()["bytes"] == 40
    cache.insert(system + [900] * 30 + [902] * 20, b"c" * 30)  # A, turn 2, supersedes A's turn 1 only
    assert cache.stats()["entries"] == 2 and cache.stats()["bytes"] == 50
    entry, _ = cache.lookup(system[:35] + [901] * 30)
    assert entry.state == b"b" * 20


def test_covered_counts_whole_blocks_without_touching_counters():
    cache = HostPromptCache(capacity_bytes=10_000, max_entries=10, ttl_seconds=0)
    base = list(range(64))
    cache.insert(base[:48], b"y" * 10)
    before = cache.stats()
    assert cache.covered(base + [1, 2]) == 48
    assert cache.covered(base[:20]) == 16
    assert cache.covered([9] * 40) == 0
    after = cache.stats()
    assert (after["lookups"], after["hits"]) == (before["lookups"], before["hits"])


def test_lru_eviction_by_bytes_and_entries_and_oversized_rejection():
    cache = HostPromptCache(capacity_bytes=100, max_entries=2, ttl_seconds=0)
    a, b, c = ([i] * BLOCK_SIZE for i in (1, 2, 3))
    cache.insert(a, b"a" * 40)
    cache.insert(b, b"b" * 40)
    cache.lookup(a)  # a becomes the most recently used
    cache.insert(c, b"c" * 40)  # two entries at most: b goes
    assert cache.lookup(b) is None and cache.lookup(a) is not None and cache.lookup(c) is not None
    assert cache.stats()["unique_block_hashes"] == 2
    assert not cache.insert([4] * BLOCK_SIZE, b"z" * 101)
    stats = cache.stats()
    assert stats["evictions_lru"] == 1 and stats["rejections_oversized"] == 1 and stats["entries"] == 2


def test_ttl_expiry_and_idempotent_reset():
    cache = HostPromptCache(capacity_bytes=1000, max_entries=10, ttl_seconds=0.05)
    cache.insert([1] * BLOCK_SIZE, b"a")
    time.sleep(0.1)
    assert cache.lookup([1] * BLOCK_SIZE) is None
    assert cache.stats()["evictions_ttl"] == 1
    cache.insert([2] * BLOCK_SIZE, b"bb")
    assert cache.reset() == {"entries": 1, "bytes": 2}
    assert cache.reset() == {"entries": 0, "bytes": 0}
