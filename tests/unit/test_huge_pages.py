"""Which address ranges a context's creation mapped, and the whole huge pages inside them."""
from __future__ import annotations

from mlxcel.engine.huge_pages import HUGE_PAGE, aligned_pieces, anonymous_spans, new_spans

MAPS = """\
55d0c0000000-55d0c0021000 r--p 00000000 fe:00 11 /usr/bin/python3.11
55d0c1000000-55d0c1400000 rw-p 00000000 00:00 0                          [heap]
7f1000000000-7f101d000000 r--s 00000000 fe:00 42 /models/qwen.gguf
7f101d000000-7f101e000000 rw-p 00000000 00:00 0
7f101e000000-7f101e001000 ---p 00000000 00:00 0
7f1020000000-7f1020800000 rw-s 00000000 00:01 7                          /dev/zero (deleted)
7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]
"""


def test_only_private_writable_anonymous_mappings_count():
    # not the heap or the stack (named), not a file, not a guard page, not a shared mapping
    assert anonymous_spans(MAPS) == [(0x7F101D000000, 0x7F101E000000)]


def test_what_a_creation_mapped_is_the_new_coverage_not_whole_merged_mappings():
    before = [(0x1000_0000, 0x1040_0000), (0x2000_0000, 0x2010_0000)]
    # the first grew upwards (merged with a new neighbour), a second one appeared, the third is gone
    after = [(0x1000_0000, 0x1100_0000), (0x3000_0000, 0x3080_0000)]
    assert new_spans(before, after) == [(0x1040_0000, 0x1100_0000), (0x3000_0000, 0x3080_0000)]


def test_a_range_inside_an_old_one_is_not_new_and_one_around_it_leaves_two_pieces():
    before = [(0x1040_0000, 0x1080_0000)]
    assert new_spans(before, [(0x1040_0000, 0x1060_0000)]) == []
    assert new_spans(before, [(0x1000_0000, 0x1100_0000)]) == [(0x1000_0000, 0x1040_0000),
                                                                 (0x1080_0000, 0x1100_0000)]


def test_only_whole_aligned_huge_pages_are_advised_and_never_a_mappings_first_page():
    # a glibc mmap chunk: its header sits in the first page; the span starts on a huge page boundary
    start = 0x7F00_0000_0000
    pieces = aligned_pieces([(start, start + 5 * HUGE_PAGE + 4096)])
    assert pieces == [(start + HUGE_PAGE, start + 5 * HUGE_PAGE)]
    # an unaligned span keeps its whole aligned interior
    assert aligned_pieces([(start + 4096, start + 3 * HUGE_PAGE)]) == [(start + HUGE_PAGE, start + 3 * HUGE_PAGE)]
    # too small to hold one aligned huge page
    assert aligned_pieces([(start + 4096, start + 2 * HUGE_PAGE - 4096)]) == []


def test_advising_real_memory_keeps_its_contents_and_stops_collapsing_at_the_cap():
    import mmap

    from mlxcel.engine.huge_pages import advise, thp_available

    region = mmap.mmap(-1, 8 * HUGE_PAGE)
    region.write(bytes(range(256)) * (8 * HUGE_PAGE // 256))
    address = ctypes_address(region)
    pieces = aligned_pieces([(address, address + 8 * HUGE_PAGE)])
    advised, collapsed = advise(pieces, collapse_max=2 * HUGE_PAGE)
    if thp_available():
        assert advised >= 6 * HUGE_PAGE
    assert collapsed <= 2 * HUGE_PAGE
    region.seek(0)
    assert region.read(8 * HUGE_PAGE) == bytes(range(256)) * (8 * HUGE_PAGE // 256)


def ctypes_address(region) -> int:
    import ctypes

    return ctypes.addressof(ctypes.c_char.from_buffer(region))
