"""Measurements kept on disk, one file per model file and the settings that change them,
so that a restart does not spend seconds measuring again: decode cost curves (a curve
read back is only a shape: the running scale, DecodeCosts.observe, follows what batches
take on the machine as it is now) and the attention kernel chosen for `-fa auto`."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import platform
from pathlib import Path

import llama_cpp

from mlxcel.engine.weight_buffers import cpuinfo

log = logging.getLogger("mlxcel.engine")

# files kept in one directory: each model file, its settings (-c, -np, -t, ...) and the host
# make a key, so a home that serves many models, or a test suite writing models to temporary
# paths, would otherwise add files without end; the least recently used go first
MAX_FILES = 256


@functools.cache
def host_fingerprint() -> str:
    """What makes one machine's timings another's: the CPU's model name, the cores this
    process may use, and llama.cpp's build and CPU features (which also decide where its
    weights go: AMX, CPU_REPACK or plain). A home shared between machines, or a disk
    moved to another, then measures again instead of reading another CPU's figures."""
    cpu = next((line.split(":", 1)[-1].strip() for line in cpuinfo().splitlines() if line.startswith("model name")),
               platform.processor() or platform.machine())
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 0
    features = llama_cpp.llama_print_system_info().decode(errors="replace")
    return f"{cpu} | {cores} cores | {features}"


def cost_file(directory: Path, model: Path, settings: dict) -> Path:
    """Where the curve of `model` under `settings` (JSON-able values) on this machine is
    kept; the model file's size and modification time and the host (host_fingerprint)
    are part of the key."""
    stat = model.stat()
    key = json.dumps({"model": str(model.resolve()), "size": stat.st_size, "mtime": stat.st_mtime_ns,
                      "host": host_fingerprint(), **settings}, sort_keys=True, default=str)
    return directory / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def load_json(path: Path) -> dict | None:
    """The object saved at `path`, or None when there is none or it is unreadable. A file
    read is marked used (its modification time), so pruning keeps it."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict):
        return None
    with contextlib.suppress(OSError):  # a read-only home still reads
        os.utime(path)
    return raw


def save_json(path: Path, data: dict, what: str) -> None:
    """Save `data` (atomically); a failure only costs a measurement next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_suffix(f".{os.getpid()}.tmp")
        temp.write_text(json.dumps(data))
        temp.replace(path)
    except OSError as exc:
        log.warning("could not save the %s to %s: %s", what, path, exc)
        return
    prune(path.parent)


def prune(directory: Path, keep: int | None = None) -> int:
    """Remove all but the `keep` (MAX_FILES) most recently used files of `directory`, and
    temporary files a crashed save left: how many went."""
    keep = MAX_FILES if keep is None else keep
    aged = []
    for entry in directory.glob("*.json"):
        with contextlib.suppress(OSError):  # another server may prune at the same time
            aged.append((entry.stat().st_mtime_ns, entry))
    aged.sort()
    doomed = [entry for _, entry in aged[:max(0, len(aged) - keep)]]
    doomed += [temp for temp in directory.glob("*.tmp") if not _pid_alive(temp)]
    removed = 0
    for entry in doomed:
        with contextlib.suppress(OSError):
            entry.unlink()
            removed += 1
    return removed


def _pid_alive(temp: Path) -> bool:
    """Whether the process that writes `temp` (NAME.PID.tmp) still runs."""
    try:
        os.kill(int(temp.suffixes[-2][1:]), 0)
    except (IndexError, ValueError):
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def load_costs(path: Path) -> dict[int, float] | None:
    """The curve saved at `path`, or None when there is none or it is unreadable."""
    try:
        measured = {int(n): float(seconds) for n, seconds in (load_json(path) or {}).items()}
    except (ValueError, TypeError):
        return None
    return measured if measured and 1 in measured and min(measured.values()) > 0 else None


def save_costs(path: Path, measured: dict[int, float]) -> None:
    save_json(path, {str(n): seconds for n, seconds in measured.items()}, "decode cost curve")
