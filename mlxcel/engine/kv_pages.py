"""The KV cache holds memory only for the cells a request has used.

llama.cpp clears a context's KV buffer when it makes it (zeros, so no NaN is ever
read from memory never written), and that write makes every page of the buffer
resident: a server started with `-c 32768` holds the whole cache from its first
second, whatever its requests use. Zero pages need not be held: the kernel gives a
private anonymous page back as zeros when it is next touched. So once the context
exists the server finds its KV buffer and drops its pages (`MADV_DONTNEED`): the
cache reads exactly as before, and what the slots fill comes back page by page.

The buffer is found without any address from llama.cpp: among the address ranges the
context's creation mapped, a run of resident pages as long as the KV buffer size
llama.cpp logged while making it (`CPU KV buffer size = N MiB`), every byte of it zero
but the first page's (the allocator's header, which stays). A run that is not exactly
that (another allocation beside it, a page already written) is left alone."""

from __future__ import annotations

import ctypes
import logging
import re
import threading
from contextlib import contextmanager

import numpy as np

from mlxcel.engine.page_calls import MADV_DONTNEED, PAGE, madvise, mincore

log = logging.getLogger("mlxcel.llama")

_KV_SIZE = re.compile(r"\bCPU KV buffer size\s*=\s*([\d.]+) MiB")
_capture = threading.local()

Span = tuple[int, int]


def kv_buffer_sizes(lines: list[str]) -> list[int]:
    """Bytes of each host KV buffer llama.cpp logged (a sliding-window model has two),
    to the 0.01 MiB it prints."""
    return [round(float(m.group(1)) * (1 << 20)) for line in lines if (m := _KV_SIZE.search(line))]


@contextmanager
def captured_llama_log():
    """The lines llama.cpp logs from this thread meanwhile (see `offer`)."""
    lines: list[str] = []
    _capture.lines = lines
    try:
        yield lines
    finally:
        _capture.lines = None


def offer(text: str) -> None:
    """Called by the llama log callback with every line: kept while this thread captures."""
    lines = getattr(_capture, "lines", None)
    if lines is not None:
        lines.append(text)


def resident_runs(residency: bytes, start: int) -> list[Span]:
    """(start, end) of each run of resident pages in a mincore() vector for the pages
    from `start`."""
    runs, run_start = [], None
    for i, flag in enumerate(residency):
        if flag & 1:
            if run_start is None:
                run_start = i
        elif run_start is not None:
            runs.append((start + run_start * PAGE, start + i * PAGE))
            run_start = None
    if run_start is not None:
        runs.append((start + run_start * PAGE, start + len(residency) * PAGE))
    return runs


def matches(run: Span, size: int, slack: int = 4 * PAGE) -> bool:
    """True when the run is the size llama.cpp logged, within the rounding of its MiB
    figure and the allocator's header page."""
    return abs((run[1] - run[0]) - size) <= slack + (1 << 20) // 200


def _all_zero(start: int, end: int) -> bool:
    words = np.frombuffer((ctypes.c_char * (end - start)).from_address(start), dtype=np.uint64)
    return not words.any()


def drop_cleared_kv(new_spans: list[Span], kv_sizes: list[int]) -> list[Span]:
    """Drop the pages of each KV buffer found in `new_spans` (what the context's
    creation mapped); the runs dropped."""
    if not kv_sizes:
        return []
    dropped = []
    wanted = list(kv_sizes)
    for lo, hi in new_spans:
        lo, hi = lo // PAGE * PAGE, -(-hi // PAGE) * PAGE
        residency = mincore(lo, hi - lo)
        if residency is None:
            continue
        for run in resident_runs(residency, lo):
            size = next((s for s in wanted if matches(run, s)), None)
            body = (run[0] + PAGE, run[1])  # the first page holds the allocator's header
            if size is None or body[1] <= body[0] or not _all_zero(*body):
                continue
            if madvise(body[0], body[1] - body[0], MADV_DONTNEED):
                wanted.remove(size)
                dropped.append(body)
    return dropped
