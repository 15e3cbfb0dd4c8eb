"""Which model and profile a request names (003's addressing), and the /v1/models rows.

`model` is an id, an alias (which may fix a profile), or either followed by
`@profile`: the string splits on its LAST `@`, and only when the suffix names a
known profile or intent; otherwise the whole string is looked up as an id (and gets
404). The body's `profile` field names the profile for this request: it wins over
an `@profile` in the name, an alias's profile and the model's own. An empty `model`
goes to the default model, else the sole model, else it is a 400."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mlxcel.fleet.entries import FleetConfig, ModelEntry
from mlxcel.fleet.errors import ModelNotFound, ModelRequired, UnknownProfile
from mlxcel.fleet.profiles import RequestDefaults, effective_profile, is_known_profile, known_profiles, resolve_defaults


@dataclass
class Addressed:
    entry: ModelEntry
    profile: str | None  # the effective profile name (None: no profile applies)
    defaults: RequestDefaults
    name: str  # what the request named (the default's name when it named nothing)


def available(config: FleetConfig) -> list[str]:
    """The names a request may use: ids and aliases, sorted."""
    return sorted(set(config.models) | set(config.aliases))


def default_name(config: FleetConfig) -> str | None:
    """What an empty `model` addresses: the configured default, else the sole model."""
    if config.default_model:
        return config.default_model
    return next(iter(config.models)) if len(config.models) == 1 else None


def _split(target: str) -> tuple[str, str | None]:
    base, _, suffix = target.rpartition("@")
    return (base, suffix) if base else (target, None)


def _lookup(config: FleetConfig, name: str) -> tuple[ModelEntry, str | None] | None:
    """(entry, profile the name fixes) for an id or an alias, None when neither."""
    if name in config.models:
        return config.models[name], None
    target = config.aliases.get(name)
    if target is None:
        return None
    model_id, profile = _split(target)
    entry = config.models.get(model_id)
    return (entry, profile) if entry is not None else None


def resolve_name(config: FleetConfig, name: str) -> tuple[ModelEntry, str | None]:
    """The entry and the profile `name` fixes (id, alias, or either with @profile)."""
    found = _lookup(config, name)
    if found is None and "@" in name:
        base, suffix = _split(name)
        if suffix and is_known_profile(config, suffix):
            found = _lookup(config, base)
            found = (found[0], suffix) if found is not None else None
    if found is None:
        raise ModelNotFound(name, available(config))
    return found


def address(config: FleetConfig, model: str | None, profile: str | None,
            family_of: Callable[[ModelEntry], str | None]) -> Addressed:
    """The model and request defaults a request gets. ModelNotFound (404),
    UnknownProfile (400) or ModelRequired (400) when it cannot be served."""
    if model is not None and not isinstance(model, str):
        raise ModelNotFound(str(model), available(config))
    name = model or default_name(config)
    if not name:
        raise ModelRequired(available(config))
    entry, named_profile = resolve_name(config, name)
    if profile:
        if not isinstance(profile, str) or not is_known_profile(config, profile):
            raise UnknownProfile(str(profile), known_profiles(config))
        named_profile = profile
    defaults = resolve_defaults(config, entry, named_profile, family_of(entry))
    return Addressed(entry=entry, profile=defaults.profile, defaults=defaults, name=model or name)


def listing(config: FleetConfig) -> list[dict]:
    """One /v1/models row per id and per alias (with `alias_of`), each with the profile
    a request naming it gets and the `default` marker; the server adds the live markers."""
    default = default_name(config)
    rows = []
    for model_id, entry in config.models.items():
        rows.append({"id": model_id, "object": "model", "owned_by": "mlxcel",
                     "profile": effective_profile(config, entry, None), "default": model_id == default})
    for alias in config.aliases:
        entry, profile = _lookup(config, alias)
        rows.append({"id": alias, "object": "model", "owned_by": "mlxcel", "alias_of": entry.id,
                     "profile": effective_profile(config, entry, profile), "default": alias == default})
    return rows
