"""Slot files: their token layout (llama-server's server-tokens state), the file-name rule, and
saves that write whole or not at all and never fill the disk."""

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


class _Runtime:
    ctx = None


def _patched_llama(monkeypatch, state_size: int, write):
    """llama.cpp's two calls a save makes, with a state of `state_size` bytes and a writer
    `write(path) -> bytes written` (0: the write failed)."""
    import llama_cpp

    calls = []
    monkeypatch.setattr(llama_cpp, "llama_state_seq_get_size", lambda ctx, seq: state_size)

    def save_file(ctx, path, seq, tokens, n_tokens):
        calls.append(path.decode())
        return write(path.decode())

    monkeypatch.setattr(llama_cpp, "llama_state_seq_save_file", save_file)
    return calls


def test_a_failed_save_leaves_the_earlier_file_whole_and_no_partial_file(tmp_path, monkeypatch):
    """A write that fails half-way (a full disk) goes to a temporary file: the file of that
    name from an earlier save keeps its bytes, and nothing else is left in the folder."""
    from mlxcel.engine import slot_files

    target = tmp_path / "kept.bin"
    target.write_bytes(b"an earlier save")

    def half_write(path: str) -> int:
        with open(path, "wb") as out:
            out.write(b"trunc")
        return 0

    _patched_llama(monkeypatch, 1000, half_write)
    with pytest.raises(slot_files.SlotFileError, match="Unable to save slot"):
        slot_files.save(_Runtime(), 0, [1, 2, 3], str(target))
    assert target.read_bytes() == b"an earlier save"
    assert [p.name for p in tmp_path.iterdir()] == ["kept.bin"]

    def whole_write(path: str) -> int:
        with open(path, "wb") as out:
            out.write(b"a new save")
        return 10

    _patched_llama(monkeypatch, 1000, whole_write)
    assert slot_files.save(_Runtime(), 0, [1, 2, 3], str(target)).n_bytes == 10
    assert target.read_bytes() == b"a new save" and [p.name for p in tmp_path.iterdir()] == ["kept.bin"]


def test_a_save_that_would_fill_the_disk_is_refused_before_writing(tmp_path, monkeypatch):
    import shutil

    from mlxcel.engine import slot_files

    free = shutil.disk_usage(tmp_path).free
    calls = _patched_llama(monkeypatch, free - slot_files.DISK_RESERVE // 2, lambda path: 1)
    with pytest.raises(slot_files.SlotFileError, match="MiB free") as refused:
        slot_files.save(_Runtime(), 0, [1], str(tmp_path / "big.bin"))
    assert refused.value.client_error is False
    assert calls == [] and list(tmp_path.iterdir()) == []
