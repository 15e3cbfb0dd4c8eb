"""How --models-dir finds a folder's models, as llama-server's router finds them."""

from __future__ import annotations

from mlxcel.fleet.models_dir import scan_models_dir


def test_files_and_sub_folders_become_models_and_companions_do_not(tmp_path):
    for name in ("plain.gguf", "mmproj-plain.gguf", "mtp-plain.gguf", "readme.md",
                 "split/split-00002-of-00002.gguf", "split/split-00001-of-00002.gguf",
                 "vision/model-q4.gguf", "vision/mmproj-model-f16.gguf", "empty/notes.txt",
                 "drafted/dflash-head.gguf", "drafted/main.gguf"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    models = scan_models_dir(tmp_path)
    assert models == {
        "plain": {"path": str(tmp_path / "plain.gguf")},
        "split": {"path": str(tmp_path / "split/split-00001-of-00002.gguf")},
        "vision": {"path": str(tmp_path / "vision/model-q4.gguf"),
                   "mmproj": str(tmp_path / "vision/mmproj-model-f16.gguf")},
        "drafted": {"path": str(tmp_path / "drafted/main.gguf")},
    }


def test_a_name_that_cannot_be_an_id_is_skipped_and_the_rest_served(tmp_path, caplog):
    for name in ("plain.gguf", "odd@coding.gguf", ".gguf", "at@folder/model.gguf"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    models = scan_models_dir(tmp_path)
    assert models == {"plain": {"path": str(tmp_path / "plain.gguf")}}
    assert "odd@coding.gguf: not served" in caplog.text and "at@folder/model.gguf: not served" in caplog.text


def test_every_header_of_a_large_folder_is_read_once(tmp_path):
    """A folder of more models than the old cache held (64): each /v1/models scanned
    them in turn, so every header was read again, each time, on the event loop."""
    import struct

    from mlxcel.fleet.model_files import _read, metadata

    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text)) + text.encode()

    header = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + string("general.architecture") + struct.pack("<I", 8)
    paths = []
    for n in range(100):
        path = tmp_path / f"m{n}.gguf"
        path.write_bytes(header + string("llama") + b"\0" * 16)
        paths.append(str(path))
    for path in paths:
        metadata(path)
    misses = _read.cache_info().misses
    for path in paths:
        assert metadata(path) == {"GGUF.version": 3, "GGUF.tensor_count": 0, "general.architecture": "llama"}
    assert _read.cache_info().misses == misses
