"""Finding a context's cleared KV buffer among the pages its creation mapped, and dropping
only what is exactly that."""
from __future__ import annotations

import ctypes
import mmap

from mlxcel.engine.kv_pages import PAGE, drop_cleared_kv, kv_buffer_sizes, matches, resident_runs

LOG = [
    "llama_kv_cache:        CPU KV buffer size =   180.00 MiB",
    "llama_kv_cache: size =  180.00 MiB (  8192 cells,  30 layers,  4/4 seqs), K (f16):   90.00 MiB",
    "llama_kv_cache_iswa: creating SWA KV cache, size = 1536 cells",
    "llama_kv_cache:        CPU KV buffer size =     5.25 MiB",
    "llama_kv_cache:      CUDA0 KV buffer size =   512.00 MiB",
    "llama_context:        CPU compute buffer size =   102.51 MiB",
]


def test_the_host_kv_buffers_llama_cpp_logged_and_nothing_else():
    assert kv_buffer_sizes(LOG) == [180 << 20, round(5.25 * (1 << 20))]


def test_resident_runs_from_a_mincore_vector():
    base = 0x7F00_0000_0000
    assert resident_runs(bytes([1, 1, 0, 0, 1, 0, 1, 1, 1]), base) == [
        (base, base + 2 * PAGE), (base + 4 * PAGE, base + 5 * PAGE), (base + 6 * PAGE, base + 9 * PAGE)]
    assert resident_runs(bytes([0, 0]), base) == []


def test_a_run_matches_the_logged_size_within_its_rounding_and_a_header_page():
    size = 180 << 20
    assert matches((0, size + PAGE), size) and matches((0, size - PAGE), size)
    assert not matches((0, size + (1 << 20)), size) and not matches((0, size // 2), size)


def _region(n_pages: int):
    region = mmap.mmap(-1, n_pages * PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return region, ctypes.addressof(ctypes.c_char.from_buffer(region))


def _resident_pages(address: int, n_pages: int) -> int:
    libc = ctypes.CDLL(None)
    vec = ctypes.create_string_buffer(n_pages)
    assert libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(n_pages * PAGE), vec) == 0
    return sum(b & 1 for b in vec.raw)


def test_a_zeroed_buffer_of_the_logged_size_is_dropped_and_still_reads_zero():
    region, address = _region(64)
    region.write(b"\x01" * 64)  # the allocator's header in the first page
    region.write(b"\x00" * (63 * PAGE))  # the cleared buffer: every page written, so resident
    assert _resident_pages(address, 64) == 64
    dropped = drop_cleared_kv([(address, address + 64 * PAGE)], [63 * PAGE])
    assert dropped == [(address + PAGE, address + 64 * PAGE)]
    assert _resident_pages(address, 64) == 1  # the header's page stays
    region.seek(PAGE)
    assert region.read(63 * PAGE) == bytes(63 * PAGE) and region[:64] == b"\x01" * 64


def test_a_buffer_holding_data_or_of_another_size_is_left_alone():
    region, address = _region(64)
    region.write(b"\x00" * (64 * PAGE))
    region[40 * PAGE] = 7  # one byte written somewhere: not a cleared KV buffer
    assert drop_cleared_kv([(address, address + 64 * PAGE)], [63 * PAGE]) == []
    assert region[40 * PAGE] == 7 and _resident_pages(address, 64) == 64
    other, other_address = _region(64)
    other.write(b"\x00" * (64 * PAGE))
    assert drop_cleared_kv([(other_address, other_address + 64 * PAGE)], [32 * PAGE]) == []
    assert _resident_pages(other_address, 64) == 64
