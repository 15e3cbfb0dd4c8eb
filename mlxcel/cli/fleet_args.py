"""`mlxcel serve --config FILE`: the file's models, and its `server` block applied to
the server's settings where no command-line flag set them (flags win, as in gmlx);
`mlxcel serve --models-dir FOLDER`: the folder's models (llama-server's router mode)."""

from __future__ import annotations

import dataclasses

from mlxcel.cli.serve_args import split_llama_server_flags
from mlxcel.cli.usage import UsageError
from mlxcel.config import ServerConfig
from mlxcel.fleet.config_file import load_fleet_config
from mlxcel.fleet.entries import FleetConfig
from mlxcel.fleet.errors import ConfigError
from mlxcel.fleet.models_dir import models_dir_fleet
from mlxcel.fleet.models_preset import models_preset_fleet


def _is_tuning(flag: str) -> bool:
    """A llama-server flag the command line accepts only to name it as tuning."""
    try:
        return bool(split_llama_server_flags([flag])[1])
    except UsageError:  # one the command line refuses
        return False


def _given(config: ServerConfig, *flags: str) -> bool:
    return bool(config.explicit_flags & set(flags))


def fleet_settings(config: ServerConfig) -> tuple[ServerConfig, FleetConfig]:
    try:
        if config.models_preset is not None:
            fleet = models_preset_fleet(config.models_preset, config.models_dir, config.models_max,
                                        config.models_autoload, config.explicit_flags, _is_tuning)
        elif config.models_dir is not None:
            fleet = models_dir_fleet(config.models_dir, config.models_max, config.models_autoload)
        else:
            fleet = load_fleet_config(config.config_file)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    if config.config_file is not None:  # the router's flags, where given, win over the file
        if _given(config, "--models-max"):
            fleet = dataclasses.replace(fleet, max_models=config.models_max or None)
        fleet = dataclasses.replace(fleet, autoload=config.models_autoload)
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
