"""Where pulled models live on disk.

Everything is computed at call time, so a change of ``MLXCEL_HOME`` (tests set it
per test) takes effect at once.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

from mlxcel.models.catalog import CatalogEntry

DEFAULT_HOME = "~/.cache/mlxcel"


def mlxcel_home() -> Path:
    """``$MLXCEL_HOME`` if set and not empty, else ``~/.cache/mlxcel``."""
    return Path(os.environ.get("MLXCEL_HOME") or DEFAULT_HOME).expanduser()


def models_dir() -> Path:
    """The directory that holds pulled model files (not created here)."""
    return mlxcel_home() / "models"


def model_path(entry: CatalogEntry) -> Path:
    """Where the assembled file of ``entry`` is (or would be) stored."""
    return models_dir() / entry.filename


def lock_path(entry: CatalogEntry) -> Path:
    """The lock file that serialises pulls of ``entry``."""
    return models_dir() / f".{entry.filename}.lock"


def temp_prefix(entry: CatalogEntry) -> str:
    """Name prefix of the temporary assembly file of ``entry``."""
    return f".{entry.filename}."


TEMP_SUFFIX = ".tmp"


def download_prefix(entry: CatalogEntry) -> str:
    """Name prefix of the temporary directory that wheels of ``entry`` land in."""
    return f".{entry.filename}.download-"


def leftovers(entry: CatalogEntry) -> list[Path]:
    """Temporary files and directories of ``entry`` left by an interrupted pull.

    Only safe to delete while holding the entry's lock.
    """
    directory = models_dir()
    name = glob.escape(entry.filename)
    patterns = (f".{name}.*{TEMP_SUFFIX}", f".{name}.download-*")
    return sorted(p for pattern in patterns for p in directory.glob(pattern))
