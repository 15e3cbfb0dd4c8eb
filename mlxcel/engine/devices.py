"""The compute devices llama.cpp was built with, as llama-server's --list-devices prints
them: every device but the CPU (GPUs, integrated GPUs, accelerators), each with its
memory. A CPU-only build has none."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import llama_cpp

_CPU = 0  # GGML_BACKEND_DEVICE_TYPE_CPU
_MIB = 1024 * 1024


@dataclass(frozen=True)
class Device:
    name: str
    description: str
    total_mib: int
    free_mib: int


def _registry() -> ctypes.CDLL:
    """libggml, which holds the backend registry, from the folder llama_cpp loads it from."""
    lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml.so"))
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
        getattr(lib, name).argtypes = [ctypes.c_void_p]
        getattr(lib, name).restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                            ctypes.POINTER(ctypes.c_size_t)]
    return lib


def available_devices() -> list[Device]:
    llama_cpp.llama_backend_init()
    lib = _registry()
    devices = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        if lib.ggml_backend_dev_type(dev) == _CPU:
            continue
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        devices.append(Device(lib.ggml_backend_dev_name(dev).decode(errors="replace"),
                              lib.ggml_backend_dev_description(dev).decode(errors="replace"),
                              total.value // _MIB, free.value // _MIB))
    return devices


def device_listing() -> str:
    """llama-server's --list-devices text."""
    lines = ["Available devices:"]
    devices = available_devices()
    rows = [f"  {d.name}: {d.description} ({d.total_mib} MiB, {d.free_mib} MiB free)" for d in devices]
    lines += rows or ["  (none)"]
    return "\n".join(lines)
