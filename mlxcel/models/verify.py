"""Hashing of model files, and the ``<file>.verified`` stamp that caches a check.

The stamp records size, mtime_ns, inode and sha256 of a file that was hashed. While
the file's size, mtime and inode still match, the stamp vouches for the hash and a
big file need not be read again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

CHUNK = 1 << 20

STAMP_SUFFIX = ".verified"


def sha256_file(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    """Hex sha256 of ``path``, read in chunks; ``on_bytes(n)`` after each chunk."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            if on_bytes is not None:
                on_bytes(len(chunk))
    return digest.hexdigest()


def stamp_path(path: Path) -> Path:
    return path.with_name(path.name + STAMP_SUFFIX)


def _fingerprint(path: Path) -> dict[str, int]:
    st = os.stat(path)
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def write_stamp(path: Path, sha256: str) -> None:
    """Record that ``path``, as it is now, has digest ``sha256`` (atomic write)."""
    write_stamp_record(stamp_path(path), {**_fingerprint(path), "sha256": sha256})


def write_stamp_record(stamp: Path, record: dict) -> None:
    """Write a stamp's JSON record atomically: a reader sees the old one or this one."""
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, stamp)
    finally:
        tmp.unlink(missing_ok=True)


def remove_stamp(path: Path) -> None:
    stamp_path(path).unlink(missing_ok=True)


def stamp_vouches(path: Path, sha256: str) -> bool:
    """True if a stamp says ``path`` has digest ``sha256`` and the file is unchanged."""
    try:
        record = json.loads(stamp_path(path).read_text())
        current = _fingerprint(path)
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict):
        return False
    unchanged = all(record.get(key) == value for key, value in current.items())
    return unchanged and record.get("sha256") == sha256
