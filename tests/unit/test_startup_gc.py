"""Start-up's objects leave the collector's view; what is made afterwards, cycles
included, is still collected."""

from __future__ import annotations

import gc
import weakref

from mlxcel.server.startup_gc import settle_startup_objects


class Node:
    def __init__(self) -> None:
        self.peer = self


def test_startup_objects_are_frozen_and_later_cycles_still_collected():
    before = gc.get_freeze_count()
    kept = [Node() for _ in range(100)]
    settle_startup_objects()
    try:
        assert gc.get_freeze_count() >= before + len(kept)
        later = Node()  # a cycle: only the collector frees it
        gone = weakref.ref(later)
        del later
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()  # leave the test process's collector as it was
