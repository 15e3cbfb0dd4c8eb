"""trim_heap (engine/page_calls.py): after a model's objects are freed, the pages malloc
kept on its free lists go back to the kernel. A fragmented heap (every tenth block still
alive, so nothing can be cut from its top) keeps its resident size until trimmed."""

from __future__ import annotations

import platform

import pytest

from mlxcel.engine.page_calls import trim_heap


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_freed_heap_pages_go_back_to_the_kernel():
    blocks = [bytes(2000) + i.to_bytes(4, "little") for i in range(60_000)]  # ~120 MiB on malloc's heap
    kept = blocks[::10]
    del blocks
    freed = _rss_mib()
    assert trim_heap() is True
    trimmed = _rss_mib()
    assert freed - trimmed > 60, (freed, trimmed)
    assert len(kept) == 6000


class _Engine:
    """Stands for a closed engine: objects that refer to each other, holding a buffer."""

    def __init__(self) -> None:
        self.slot = {"engine": self, "buffer": bytearray(1 << 20)}


def test_give_back_memory_frees_what_only_cycles_held_even_with_the_collector_s_view_frozen():
    import gc
    import weakref

    from mlxcel.engine.page_calls import give_back_memory

    gc.freeze()  # as the server does after start; a model loaded later is not frozen
    try:
        engine = _Engine()
        gone = weakref.ref(engine)
        del engine
        assert gone() is not None  # reference counting alone cannot free a cycle
        give_back_memory()
        assert gone() is None
    finally:
        gc.unfreeze()
