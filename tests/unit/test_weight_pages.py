"""Finding the model file's mappings and their resident pages in /proc listings."""
from __future__ import annotations

from mlxcel.engine.weight_pages import file_mappings, model_files, resident_kib

MAPS = """\
55d0c0000000-55d0c0021000 r--p 00000000 fe:00 11 /usr/bin/python3.11
7f1000000000-7f101d000000 r--s 00000000 fe:00 42 /models/qwen.gguf
7f101d000000-7f101e000000 rw-p 00000000 00:00 0
7f1020000000-7f1021000000 r--s 00000000 fe:00 43 /models/other.gguf
7f1030000000-7f1031000000 r--s 00000000 fe:00 44 /models/qwen.gguf (deleted)
"""

SMAPS = """\
7f1000000000-7f101d000000 r--s 00000000 fe:00 42 /models/qwen.gguf
Size:             475136 kB
Rss:              400000 kB
Pss:              200000 kB
7f101d000000-7f101e000000 rw-p 00000000 00:00 0
Size:              16384 kB
Rss:               16384 kB
7f1020000000-7f1021000000 r--s 00000000 fe:00 43 /models/other.gguf
Size:              16384 kB
Rss:                8000 kB
VmFlags: rd sh mr mw me ms sd
"""


def test_only_the_model_files_own_mappings_are_found():
    assert file_mappings(MAPS, {"/models/qwen.gguf"}) == [(0x7F1000000000, 0x7F101D000000)]
    assert file_mappings(MAPS, {"/models/qwen.gguf", "/models/other.gguf"}) == [
        (0x7F1000000000, 0x7F101D000000), (0x7F1020000000, 0x7F1021000000)]
    assert file_mappings(MAPS, {"/models/absent.gguf"}) == []


def test_resident_pages_are_counted_per_file():
    assert resident_kib({"/models/qwen.gguf"}, SMAPS) == 400000
    assert resident_kib({"/models/qwen.gguf", "/models/other.gguf"}, SMAPS) == 408000
    assert resident_kib({"/models/absent.gguf"}, SMAPS) == 0


def test_a_split_model_is_every_part(tmp_path):
    parts = [tmp_path / f"big-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for part in parts:
        part.write_bytes(b"GGUF")
    (tmp_path / "big-extra.gguf").write_bytes(b"GGUF")
    (tmp_path / "single.gguf").write_bytes(b"GGUF")
    assert model_files(parts[0]) == {str(p.resolve()) for p in parts}
    assert model_files(tmp_path / "single.gguf") == {str((tmp_path / "single.gguf").resolve())}
