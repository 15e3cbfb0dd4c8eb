"""The kernel calls the page helpers make (weight_pages, kv_pages, huge_pages), bound
once: madvise and mincore, through libc; and glibc's malloc_trim, which a model's
unload calls (give_back_memory: after the cyclic collector). Off Linux, or where libc
has no such call, they answer as a refusal (False, None) and nothing changes."""

from __future__ import annotations

import ctypes
import functools
import gc

MADV_DONTNEED = 4
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
PAGE = 4096


@functools.cache
def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        libc.madvise.restype = ctypes.c_int
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.mincore.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def madvise(start: int, length: int, advice: int) -> bool:
    """True when the kernel took the advice for [start, start + length)."""
    libc = _libc()
    return libc is not None and libc.madvise(start, length, advice) == 0


def mincore(start: int, length: int) -> bytes | None:
    """One byte per page of [start, start + length), bit 0 set where it is resident;
    None where the kernel refused."""
    libc = _libc()
    if libc is None:
        return None
    vec = ctypes.create_string_buffer(length // PAGE)
    return vec.raw if libc.mincore(start, length, vec) == 0 else None


def trim_heap() -> bool:
    """Give the heap's free pages back to the kernel (glibc's malloc_trim), after a model
    is freed: without it most of what a Whisper model or a piper voice held (60-100 MiB)
    stays in the process's free lists. True where memory was released."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    return bool(trim is not None and trim(0))


def give_back_memory() -> bool:
    """After a model is closed: its engine's objects (runtime, slots, planner, sampler
    buffers) refer to each other in cycles, so only the cyclic collector frees them, and
    with long-lived objects frozen at start a full collection can be far off. Collected
    now (2-30 ms of the GIL), then the heap trimmed. Alternating two models with one
    resident, the process's anonymous memory climbed 14 MiB a load (238 to 1,291 MiB in
    80 loads); now it stays level (178 to 186 MiB in 200; bench/README.md)."""
    gc.collect()
    return trim_heap()
