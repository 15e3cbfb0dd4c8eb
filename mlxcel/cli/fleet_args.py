"""`mlxcel serve --config FILE`: the file's models, and its `server` block applied to
the server's settings where no command-line flag set them (flags win, as in gmlx)."""

from __future__ import annotations

import dataclasses

from mlxcel.cli.serve_args import UsageError
from mlxcel.config import ServerConfig
from mlxcel.fleet.config_file import load_fleet_config
from mlxcel.fleet.entries import FleetConfig
from mlxcel.fleet.errors import ConfigError


def _given(config: ServerConfig, *flags: str) -> bool:
    return bool(config.explicit_flags & set(flags))


def fleet_settings(config: ServerConfig) -> tuple[ServerConfig, FleetConfig]:
    try:
        fleet = load_fleet_config(config.config_file)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    changes: dict = {}
    if fleet.host is not None and not _given(config, "--host"):
        changes["hosts"] = [fleet.host]
    if fleet.port is not None and not _given(config, "--port"):
        changes["port"] = fleet.port
    if fleet.api_key and not _given(config, "--api-key", "--api-key-file"):
        changes["api_keys"] = [fleet.api_key]
    if fleet.cache_enabled is not None and not _given(config, "--cache-prompt", "--no-cache-prompt"):
        changes["cache_prompt"] = fleet.cache_enabled
    if fleet.embeddings is not None and config.embedding_model is None:
        changes["embedding_model"] = fleet.embeddings
    if fleet.rerank is not None and config.rerank_model is None:
        changes["rerank_model"] = fleet.rerank
    if fleet.stt is not None and config.stt_model is None:
        changes["stt_model"] = fleet.stt
    if fleet.tts is not None and config.tts_model is None:
        changes["tts_model"] = fleet.tts
    changes["model"] = str(fleet.path)  # what the start-up log names
    return dataclasses.replace(config, **changes), fleet
