"""The request defaults a profile gives one model, with gmlx's layers:

    server default profile < rule profile < model profile (or the request's @name /
    `profile` field, which replaces it) < per-model profile change < model overrides

and the request's own fields last (mlxcel.fleet.profile_apply). A layer that names a
profile expands its `extends` chain base first; a chain that reaches an intent
starts from the intent as the model's family defines it. Family values apply only
through an intent (see mlxcel.fleet.intents)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any

from mlxcel.fleet.entries import FleetConfig, ModelEntry, Profile
from mlxcel.fleet.intents import INTENTS, family, intent_values


@dataclass
class RequestDefaults:
    profile: str | None = None  # the effective profile name, None when none applies
    sampling: dict[str, Any] = field(default_factory=dict)  # canonical names (max_tokens, stop, temperature, ...)
    system: str | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Layers:
    """The settings gathered so far, later layers overwriting earlier ones key by key."""

    sampling: dict[str, Any] = field(default_factory=dict)
    system: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    thinking: str | None = None
    reasoning_effort: str | None = None

    def add(self, sampling: Any = None, system: str | None = None, kwargs: Any = None,
            thinking: str | None = None, reasoning_effort: str | None = None) -> None:
        sampling = dict(sampling or {})
        enable = sampling.pop("enable_thinking", None)  # gmlx's sampling.enable_thinking: the `thinking` switch
        self.sampling.update(sampling)
        self.kwargs.update(kwargs or {})
        self.system = system if system is not None else self.system
        if enable is not None:
            self.thinking = "on" if enable else "off"
        self.thinking = thinking if thinking is not None else self.thinking
        self.reasoning_effort = reasoning_effort if reasoning_effort is not None else self.reasoning_effort

    def add_profile(self, profile: Profile) -> None:
        self.add(profile.sampling, profile.system, profile.chat_template_kwargs, profile.thinking,
                 profile.reasoning_effort)


def known_profiles(config: FleetConfig) -> list[str]:
    """Every name a request may use: user profiles and (with family defaults on) the intents."""
    intents = INTENTS if config.family_defaults else ()
    return sorted(set(config.profiles) | set(intents))


def is_known_profile(config: FleetConfig, name: str) -> bool:
    return name in config.profiles or (config.family_defaults and name in INTENTS)


def rule_profile(config: FleetConfig, model_id: str) -> str | None:
    """The profile of the first rule whose shell pattern matches the id."""
    for pattern, profile in config.rules:
        if fnmatch.fnmatchcase(model_id, pattern):
            return profile
    return None


def expand_profile(config: FleetConfig, name: str, family_name: str | None, layers: _Layers,
                   seen: tuple[str, ...] = ()) -> None:
    """Adds profile `name` to `layers`, its `extends` chain first. A user profile with
    an intent's name replaces the intent, except as its own `extends` (there it names
    the built-in intent, so a user profile can change an intent). The loader has
    checked names and cycles; a cycle here still stops (ValueError)."""
    if name in seen:
        raise ValueError(f"profile `extends` cycle: {' -> '.join(seen + (name,))}")
    user = config.profiles.get(name)
    if user is not None:
        if user.extends == name and name in INTENTS:
            _add_intent(name, family_name, layers)
        elif user.extends:
            expand_profile(config, user.extends, family_name, layers, seen + (name,))
        layers.add_profile(user)
        return
    if name in INTENTS:
        _add_intent(name, family_name, layers)
        return
    raise KeyError(name)


def _add_intent(name: str, family_name: str | None, layers: _Layers) -> None:
    values = intent_values(name, family_name)
    layers.add(values.sampling, thinking=values.thinking, reasoning_effort=values.reasoning_effort)


def effective_profile(config: FleetConfig, entry: ModelEntry, requested: str | None) -> str | None:
    return requested or entry.profile or rule_profile(config, entry.id) or config.default_profile


def resolve_defaults(config: FleetConfig, entry: ModelEntry, requested: str | None,
                     family_name: str | None) -> RequestDefaults:
    """The defaults a request for `entry` under profile `requested` (None: the model's
    own) starts from. `requested` must be a known profile (mlxcel.fleet.addressing checks)."""
    layers = _Layers()
    server_default, rule = config.default_profile, rule_profile(config, entry.id)
    for name in (server_default, rule, requested or entry.profile):
        if name:
            expand_profile(config, name, family_name, layers)
    name = effective_profile(config, entry, requested)
    if name and name in entry.profiles:
        layers.add_profile(entry.profiles[name])
    if entry.overrides is not None:
        layers.add_profile(entry.overrides)
    return RequestDefaults(profile=name, sampling=layers.sampling, system=layers.system,
                           chat_template_kwargs=_template_kwargs(layers, family_name))


def _template_kwargs(layers: _Layers, family_name: str | None) -> dict[str, Any]:
    """`thinking` and `reasoning_effort` as the family's template reads them; the
    profile's own chat_template_kwargs win over both (as gmlx)."""
    mapped: dict[str, Any] = {}
    kwarg = family(family_name).thinking_kwarg
    if layers.thinking in ("on", "off") and kwarg:
        mapped[kwarg] = layers.thinking == "on"
    if layers.reasoning_effort is not None:
        mapped["reasoning_effort"] = layers.reasoning_effort
    return {**mapped, **layers.kwargs}
