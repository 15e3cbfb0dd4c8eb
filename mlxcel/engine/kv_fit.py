"""Whether a context's KV cache can fit the machine at all, asked before llama.cpp makes it.

llama.cpp clears the whole KV buffer when it makes a context, so every page of it is
resident for a moment (kv_pages.py drops them after), and it builds a per-cell table
first. A cache larger than the machine's memory (`-c 2000000000`, a typo's extra
zeros) cannot start: it grows until the kernel kills the process. It is refused before,
in one line that says what it would need. Only where the cache lives in host memory:
with layers offloaded to a GPU, llama.cpp places the cache and judges it there."""

from __future__ import annotations

from pathlib import Path

from mlxcel.engine.host_memory import MemoryProbeError, read_host_memory
from mlxcel.models.gguf_header import (
    Geometry,
    GGUFHeaderError,
    kv_bytes,
    kv_bytes_per_token,
    model_geometry,
    read_gguf_metadata,
)

GIB = 2**30


def cache_refusal(geometry: Geometry, n_ctx: int, type_k: str, type_v: str, swa_full: bool,
                  memory_bytes: int) -> str | None:
    """Why a cache of `n_ctx` cells cannot fit `memory_bytes`, or None when it can."""
    need = (kv_bytes_per_token(geometry, type_k, type_v) * n_ctx if swa_full
            else kv_bytes(geometry, n_ctx, type_k, type_v))
    if need <= memory_bytes:
        return None
    return (f"a KV cache of {n_ctx} tokens ({type_k}/{type_v}) needs {need / GIB:,.1f} GiB, more than this "
            f"machine's {memory_bytes / GIB:.1f} GiB of memory: lower -c (or quantize the cache: -ctk/-ctv q8_0)")


def host_cache_refusal(model_path: Path, n_ctx: int, type_k: str, type_v: str, swa_full: bool) -> str | None:
    """cache_refusal against this machine's memory (its cgroup limit included), for the
    model file's geometry; None when either cannot be read (llama.cpp then judges)."""
    try:
        geometry = model_geometry(read_gguf_metadata(model_path))
        memory = read_host_memory().total_bytes
    except (GGUFHeaderError, MemoryProbeError, OSError, ValueError):
        return None
    return cache_refusal(geometry, n_ctx, type_k, type_v, swa_full, memory)
