"""llama-server's router mode (--models-dir): every model in a folder served under
its name, loaded on its first request (unless --no-models-autoload) and unloaded,
least recently used first, when more than --models-max would be resident.

A folder's models are found as llama-server finds them: each `NAME.gguf` in it is
the model NAME (a file whose name holds `mmproj`, or starts with `mtp-`, `dspark-` or
`dflash-`, is a companion, never a model); each sub-folder is the model named after
it: its first shard (`-00001-of-`) or its one other GGUF, with the `mmproj` file
beside it as its projector. A file or folder whose name cannot be an id (empty, or
holding the `@` that separates an id from a profile) is skipped with a warning, so it
neither stops the start nor fails a /v1/reload."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from mlxcel.fleet.config_file import read_fleet_data
from mlxcel.fleet.entries import FleetConfig
from mlxcel.fleet.errors import ConfigError

log = logging.getLogger("mlxcel.fleet")
DRAFT_PREFIXES = ("mtp-", "dspark-", "dflash-")


def _companion(name: str) -> bool:
    return "mmproj" in name or name.startswith(DRAFT_PREFIXES)


def _unusable_name(name: str) -> str | None:
    """Why a model's name cannot be an id that a request addresses; None when it can."""
    if not name.strip():
        return "its name is empty"
    if "@" in name:
        return "its name holds `@`, which separates an id from a profile"
    return None


def scan_models_dir(folder: Path) -> dict[str, dict[str, str]]:
    """{model name: its `models` block (path, and mmproj when there is one)}, by name."""
    models: dict[str, dict[str, str]] = {}
    for item in sorted(folder.iterdir()):
        if item.is_dir():
            files = sorted(f for f in item.iterdir() if f.is_file() and f.name.endswith(".gguf"))
            shards = [f for f in files if "-00001-of-" in f.name]
            mains = [f for f in files if not _companion(f.name) and "-of-" not in f.name]
            main = shards[0] if shards else (mains[-1] if mains else None)
            if main is None:
                continue
            block = {"path": str(main)}
            projector = next((f for f in files if "mmproj" in f.name), None)
            if projector is not None:
                block["mmproj"] = str(projector)
            if any(f.name.startswith(DRAFT_PREFIXES) for f in files):
                log.warning("%s: its MTP / DFlash draft head is not used (mlxcel drafts with a whole model: "
                            "--model-draft)", item.name)
            models[item.name] = block
        elif item.is_file() and item.name.endswith(".gguf") and not _companion(item.name):
            models[item.name[: -len(".gguf")]] = {"path": str(item)}
    for name in [name for name in models if _unusable_name(name)]:
        log.warning("%s: not served: %s", models.pop(name)["path"], _unusable_name(name))
    return models


def models_dir_fleet(folder: str | Path, models_max: int, autoload: bool) -> FleetConfig:
    """The fleet of a models folder; ConfigError (one line) when there is nothing to serve."""
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise ConfigError(f"--models-dir: {folder} does not exist or is not a directory")
    models = scan_models_dir(folder)
    if not models:
        raise ConfigError(f"--models-dir: {folder} holds no GGUF model")
    server: dict = {"defaults": {"ttl_s": 0}}  # as llama-server's router: unloaded for room, never for idling
    if models_max > 0:
        server["max_models"] = models_max
    fleet = read_fleet_data(folder, {"models": models, "server": server}, autoload=autoload, from_models_dir=True)
    return dataclasses.replace(fleet, sources=dict.fromkeys(fleet.models, "models_dir"))
