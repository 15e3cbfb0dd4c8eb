"""Slot files' token layout (llama-server's server-tokens state) and file-name rule."""

from __future__ import annotations

import pytest

from mlxcel.engine.slot_files import PACKED_MARKER, SlotFileError, pack, unpack, valid_filename


def test_the_layout_round_trips_and_reads_older_plain_lists():
    assert pack([5, 6, 7]) == [PACKED_MARKER, 1, 3, 5, 6, 7, 0]
    assert unpack(pack([5, 6, 7])) == [5, 6, 7]
    assert unpack(pack([])) == []
    assert unpack([5, 6, 7]) == [5, 6, 7]  # no marker: a plain token list


@pytest.mark.parametrize("packed, message", [
    ([PACKED_MARKER, 2, 1, 5, 0], "version"),
    ([PACKED_MARKER, 1, 9, 5, 0], "end of server tokens"),
    ([PACKED_MARKER, 1, -4, 0], "end of server tokens"),
    ([PACKED_MARKER, 1, 1, 5, 1, 0], "media"),
    ([PACKED_MARKER], "version"),
])
def test_a_broken_layout_is_refused(packed, message):
    with pytest.raises(SlotFileError, match=message):
        unpack(packed)


@pytest.mark.parametrize("name, ok", [
    ("slot0.bin", True), ("naïve état.bin", True), (".hidden", True),
    ("", False), (".", False), ("..", False), ("a..b", False), ("../x", False), ("a/b", False), ("a\\b", False),
    (" x", False), ("x ", False), ("x.", False), ("a:b", False), ("a*b", False), ("a?b", False), ('a"b', False),
    ("a<b", False), ("a|b", False), ("tab\tname", False), ("\x7f", False), ("\x85", False), ("\ufeffbom", False),
    ("\ud800", False), ("a\u2215b", False), ("x" * 255, True), ("x" * 256, False), ("é" * 128, False),
])
def test_file_names_follow_llama_servers_rule(name, ok):
    assert valid_filename(name) is ok
