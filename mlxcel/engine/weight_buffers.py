"""Where llama.cpp keeps a model's weights on the CPU: in plain buffers, or in its
"extra" buffer types, which repack the weights for faster matrix kernels (CPU_REPACK,
and AMX on CPUs that have it). llama-server's `--repack` / `--no-repack`.

Left to itself (no flag), mlxcel repacks, as llama-server does, except where this
llama.cpp would put the weights in its AMX buffers: its AMX kernels crash the process
on the first prompt of a few dozen tokens (SIGILL or SIGSEGV in
`ggml_backend_amx_mul_mat`; ggml-org/llama.cpp#20824, #26954), seen here on a 2-core
Sapphire Rapids guest with SmolLM2 and Qwen2.5-Coder. A server that dies on its first
real request is worse than one that prefills more slowly, so there the AMX buffers are
skipped unless `--repack` asks for them: the weights that llama.cpp's CPU_REPACK buffers
take still go there, one tensor override each (cpu_repack.py), and the rest stay plain."""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import llama_cpp

log = logging.getLogger("mlxcel.llama")
CPUINFO = Path("/proc/cpuinfo")
REPACK_OFF = ("weight repacking without AMX: this llama.cpp would hold the weights in its AMX buffers, whose kernels "
              "crash on the first prompt on this CPU (ggml-org/llama.cpp#20824), so only its CPU_REPACK buffers take "
              "them; --repack allows AMX, --no-repack keeps every weight plain")
_said = False  # REPACK_OFF was logged


def build_has_amx(system_info: str) -> bool:
    """True when llama.cpp was built with its AMX kernels (llama_print_system_info's
    `AMX_INT8 = 1`)."""
    return "AMX_INT8 = 1" in system_info


def cpu_has_amx(cpuinfo: str) -> bool:
    """True when the CPU reports AMX for int8 (the `amx_int8` flag of /proc/cpuinfo)."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return "amx_int8" in line.split(":", 1)[-1].split()
    return False


@functools.cache
def cpuinfo() -> str:
    """/proc/cpuinfo, read once; empty where there is none (not Linux)."""
    try:
        return CPUINFO.read_text(errors="replace")
    except OSError:
        return ""


@functools.cache
def amx_would_hold_weights() -> bool:
    """True when repacking here would put the weights in llama.cpp's AMX buffers (never
    off Linux: llama.cpp's AMX buffers need Linux's arch_prctl)."""
    return cpu_has_amx(cpuinfo()) and build_has_amx(llama_cpp.llama_print_system_info().decode(errors="replace"))


def repack_weights(repack: bool | None) -> bool:
    """llama.cpp's `use_extra_bufts`: what --repack / --no-repack said, else on unless
    the weights would land in the AMX buffers (said once per process, when the first
    model loads)."""
    global _said
    if repack is not None:
        return repack
    if not amx_would_hold_weights():
        return True
    if not _said:
        _said = True
        log.warning("%s", REPACK_OFF)
    return False


def avoids_amx(repack: bool | None) -> bool:
    """True when the weights go to CPU_REPACK alone, AMX skipped: no flag, on a host
    where AMX would hold them."""
    return repack is None and amx_would_hold_weights()


def reference_repack_flags() -> list[str]:
    """The flags that keep llama-server's weights out of the AMX buffers here (tests and
    benchmarks start the reference with them). It cannot name CPU_REPACK alone, so
    there its weights are all plain, as mlxcel's are under `--no-repack`. (The parity
    tests' SmolLM2 is Q4_1 throughout, which CPU_REPACK does not take.)"""
    return ["--no-repack"] if amx_would_hold_weights() else []
