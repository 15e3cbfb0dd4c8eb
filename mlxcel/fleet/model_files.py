"""What a configured model's GGUF header says, read once per file version: its
metadata, its KV geometry and its family (for intents). Nothing here loads a model
or pulls one: a catalog model that is not pulled yet has no header to read."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from mlxcel.fleet.entries import ModelEntry
from mlxcel.fleet.intents import DEFAULT_FAMILY, family_from_metadata
from mlxcel.models.catalog import CATALOG
from mlxcel.models.gguf_header import GGUFHeaderError, read_gguf_metadata
from mlxcel.models.store import model_path

log = logging.getLogger("mlxcel.fleet")


def gguf_path(path: str) -> Path:
    """Where the GGUF of a ModelEntry.path is (or will be, for a catalog name)."""
    return model_path(CATALOG[path]) if path in CATALOG else Path(path)


def metadata(path: str) -> dict[str, Any] | None:
    """The header of the entry path's GGUF (cached per file version); None when the
    file is absent or unreadable."""
    file = gguf_path(path)
    try:
        stat = file.stat()
    except OSError:
        return None
    return _read(str(file), stat.st_mtime_ns, stat.st_size)


# a models folder's every file stays cached: a smaller cache, scanned in turn by each
# /v1/models, kept none and re-read every header (a vocabulary walk) on the event loop
HEADERS_CACHED = 4096


@functools.lru_cache(maxsize=HEADERS_CACHED)
def _read(file: str, _mtime_ns: int, _size: int) -> dict[str, Any] | None:
    try:
        return read_gguf_metadata(file)
    except (OSError, GGUFHeaderError) as exc:
        log.warning("cannot read the GGUF header of %s: %s", file, exc)
        return None


def family_of(entry: ModelEntry) -> str:
    """The entry's family: `models.*.family`, else its GGUF header's, else the default
    family (a catalog model not pulled yet)."""
    if entry.family:
        return entry.family
    meta = metadata(entry.path)
    return family_from_metadata(meta) if meta is not None else DEFAULT_FAMILY
