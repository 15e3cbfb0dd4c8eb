"""Typed errors of addressing and residency; mlxcel.http.errors maps them to 003's
statuses and types once, for every API."""

from __future__ import annotations

from mlxcel.turn.errors import PromptTooLong, RequestShed, TurnError

__all__ = [
    "ConfigError",
    "ModelBusy",
    "ModelLoadDeferred",
    "ModelNotLoaded",
    "ModelNotFound",
    "ModelRequired",
    "PromptTooLong",
    "RequestShed",
    "ServerOverloaded",
    "UnknownProfile",
]

SHOWN_NAME = 200  # characters of a client's name an error echoes


def shown(name: str) -> str:
    """A name as an error echoes it: at most SHOWN_NAME characters."""
    return name if len(name) <= SHOWN_NAME else f"{name[:SHOWN_NAME]}... ({len(name)} characters)"

class ConfigError(Exception):
    """The --config file cannot be served: one line naming the file, the key and why."""


class ModelNotFound(TurnError):
    """404 model_not_found, listing the served ids and aliases."""

    def __init__(self, name: str, available: list[str]) -> None:
        super().__init__(f"The model `{shown(name)}` does not exist", code="model_not_found",
                         available_models=available)


class UnknownProfile(TurnError):
    """400 unknown_profile, listing the valid profile names."""

    def __init__(self, name: str, valid: list[str]) -> None:
        super().__init__(f"unknown profile `{shown(name)}`; valid profiles: {', '.join(valid)}", code="unknown_profile",
                         valid_profiles=valid)


class ModelRequired(TurnError):
    """400: `model` is empty and the server has no default and more than one model."""

    def __init__(self, available: list[str]) -> None:
        super().__init__("`model` is required: this server has no default model", code="model_required",
                         available_models=available)


class ModelNotLoaded(TurnError):
    """400 model_not_loaded: a server started with --no-models-autoload does not load a
    model for a request; POST /v1/keep loads it."""

    def __init__(self, model_id: str, why: str | None = None) -> None:
        super().__init__(why or f"The model `{model_id}` is not loaded and this server does not load models for "
                         "requests (--no-models-autoload): load it with POST /v1/keep", code="model_not_loaded")


class ModelLoadDeferred(TurnError):
    """503 model_load_deferred with Retry-After: the model cannot load beside the
    pinned or busy ones now; the message carries the numbers. Without Retry-After when
    no wait would help (the model alone is past the budget)."""

    def __init__(self, message: str, retry_after: int | None) -> None:
        super().__init__(message, code="model_load_deferred", retry_after=retry_after)


class ModelBusy(TurnError):
    """409: /unload of a model that is streaming."""


class ServerOverloaded(TurnError):
    """503 server_overloaded with Retry-After from the drain estimate (config mode's queue cap)."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, code="server_overloaded", retry_after=retry_after)
