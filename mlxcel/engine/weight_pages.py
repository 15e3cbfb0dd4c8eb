"""The model file's pages a process stops holding once the model is loaded.

With the file memory-mapped (llama.cpp's default), every weight the loader read stays
mapped into the process. Weights that llama.cpp's CPU_REPACK buffers take (Q4_0,
Q4_K, IQ4_NL matrices on x86, ...) are read once, copied into the repacked layout,
and never read from the file again; their file pages still count in the process's
resident memory beside the copy: 29 MiB of Qwen2.5-Coder-0.5B Q4_K_M (its 12 Q4_K
feed-forward matrices), nearly the whole file for a Q4_0 model.

So after the load the server drops its mappings' pages (`MADV_DONTNEED` over the
file's mappings: the pages stay in the page cache, shared and reclaimable, and the
file stays mapped). What llama.cpp reads again (the weights it computes with in place)
comes back on first touch, a minor fault per page, during the warm-up decode; the
repacked weights' pages and the embedding rows of tokens never seen do not. Skipped
where the pages are locked (`--mlock`: they must stay) or not mapped (`--no-mmap`).

The drop works on address ranges read from /proc/self/smaps. Another thread's model
load (llama.cpp unmaps the parts of a file it does not need) or free could unmap one of
them in between, and a new allocation take its place, which the drop would then zero:
a server loading one GGUF twice at once (as its embedding and its rerank model) died
of it. So every load, context creation, free and drop in the process holds MAPPINGS."""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

from mlxcel.engine.page_calls import MADV_DONTNEED, madvise

log = logging.getLogger("mlxcel.llama")

_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$")
MAPPINGS = threading.RLock()  # held by whatever maps, unmaps or drops a model's memory


def model_files(path: Path) -> set[str]:
    """The file, and the other parts of a split GGUF (NAME-0000k-of-0000n.gguf)."""
    path = Path(path).resolve()
    if not _SPLIT.search(path.name):
        return {str(path)}
    stem = _SPLIT.sub("", path.name)
    return {str(p) for p in path.parent.glob(f"{stem}-*-of-*.gguf") if _SPLIT.search(p.name)} | {str(path)}


def _mapping_of(line: str, files: set[str]) -> tuple[int, int] | None:
    """(start, end) when `line` is the header of a mapping of one of `files` (the lines
    of /proc/PID/maps, and the headers among /proc/PID/smaps' field lines)."""
    fields = line.split(maxsplit=5)
    if len(fields) < 6 or fields[5].strip() not in files or "-" not in fields[0]:
        return None
    lo, hi = fields[0].split("-")
    return int(lo, 16), int(hi, 16)


def file_mappings(maps_text: str, files: set[str]) -> list[tuple[int, int]]:
    """(start, end) of each mapping of one of `files` in a /proc/PID/maps or smaps listing."""
    return [span for line in maps_text.splitlines() if (span := _mapping_of(line, files)) is not None]


def resident_kib(files: set[str], smaps_text: str) -> int:
    """Resident KiB of the mappings of `files` in a /proc/PID/smaps listing."""
    total, inside = 0, False
    for line in smaps_text.splitlines():
        if line.startswith("Rss:"):
            total += int(line.split()[1]) if inside else 0
        elif not line[:1].isupper():  # a mapping's header (field names are capitalised)
            inside = _mapping_of(line, files) is not None
    return total


MAPPED_LOAD_MODES = ("auto", "mmap")  # llama.cpp's load modes that map the file without locking it


def release_after_load(path: Path, load_mode: str) -> None:
    """release_model_pages() where the load mapped the file and did not lock it, logged."""
    if load_mode not in MAPPED_LOAD_MODES:
        return
    with MAPPINGS:
        held = release_model_pages(path)
    if held:
        log.info("dropped the %d MiB of %s's mapped pages the load left resident; llama.cpp maps back those it "
                 "reads again (not the weights it repacked)", held >> 10, Path(path).name)


def release_model_pages(path: Path) -> int | None:
    """Drop this process's mapped pages of the model file(s); the KiB they held, or None
    where the kernel refused (nothing changed then)."""
    files = model_files(path)
    try:
        smaps = Path("/proc/self/smaps").read_text()
    except OSError:
        return None
    held = resident_kib(files, smaps)
    for lo, hi in file_mappings(smaps, files):
        if not madvise(lo, hi - lo, MADV_DONTNEED):
            return None
    return held
