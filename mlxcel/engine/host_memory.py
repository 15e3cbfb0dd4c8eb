"""The host's memory, read from /proc: what the governor, the capacity table and the
estimate call "memory" on llama.cpp (on the CPU the weights, the KV cache and the
compute buffers all live in host RAM).

- `total_bytes`: MemTotal, lowered to the cgroup's memory.max when a cgroup v2 limit
  is set below it (a container sees the host's MemTotal otherwise).
- `available_bytes`: MemAvailable (what the kernel can hand out without swapping),
  lowered to memory.max - memory.current under such a cgroup limit.
- `process_rss_bytes`: this process's resident set, /proc/self/statm's second field
  times the page size.

A failing read raises MemoryProbeError; callers null the fields that needed it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MEMINFO = Path("/proc/meminfo")
STATM = Path("/proc/self/statm")
CGROUP = Path("/sys/fs/cgroup")


class MemoryProbeError(RuntimeError):
    """/proc could not be read or parsed."""


@dataclass(frozen=True)
class HostMemory:
    total_bytes: int
    available_bytes: int
    process_rss_bytes: int


def read_host_memory(meminfo: Path = MEMINFO, statm: Path = STATM, cgroup: Path | None = CGROUP) -> HostMemory:
    try:
        fields = _meminfo_fields(meminfo.read_text())
        total, available = fields["MemTotal"], fields["MemAvailable"]
        rss = int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, KeyError, IndexError, ValueError) as exc:
        raise MemoryProbeError(f"cannot read the host's memory: {type(exc).__name__}: {exc}") from exc
    limit = _cgroup_limit(cgroup) if cgroup is not None else None
    if limit is not None:
        max_bytes, current = limit
        total = min(total, max_bytes)
        available = min(available, max(0, max_bytes - current))
    return HostMemory(total, available, rss)


def _meminfo_fields(text: str) -> dict[str, int]:
    """`Name:  123 kB` lines as bytes."""
    fields = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            scale = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
            fields[name.strip()] = int(parts[0]) * scale
    return fields


def _cgroup_limit(root: Path) -> tuple[int, int] | None:
    """(memory.max, memory.current) of a cgroup v2 with a limit; None without one."""
    try:
        raw = (root / "memory.max").read_text().strip()
        if raw == "max":
            return None
        return int(raw), int((root / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
