"""A configured model's effective load keys and chat template: what its llama.cpp
context is built with, from the profile it runs under when a request names none."""

from __future__ import annotations

import fnmatch
from dataclasses import replace

from mlxcel.fleet.entries import LoadSettings, ModelEntry, Profile


def with_effective_load(entry: ModelEntry, default_profile: str | None, rules: list[tuple[str, str]],
                        profiles: dict[str, Profile], own: LoadSettings) -> ModelEntry:
    """The entry with its effective load keys and template: the profile it runs under
    when a request names none (server default < rule < model profile), that profile's
    per-model change, the overrides, then the entry's own ctx_size / parallel."""
    layers: list[Profile] = []
    rule = next((p for pattern, p in rules if fnmatch.fnmatchcase(entry.id, pattern)), None)
    for name in (default_profile, rule, entry.profile):
        layers.extend(_chain(name, profiles))
    effective = entry.profile or rule or default_profile
    if effective in entry.profiles:
        layers.append(entry.profiles[effective])
    if entry.overrides is not None:
        layers.append(entry.overrides)
    load, template = LoadSettings(), None
    for profile in layers:
        load = _merge_load(load, profile.load)
        template = profile.chat_template or template
    return replace(entry, load=_merge_load(load, own), chat_template=template)


def _chain(name: str | None, profiles: dict[str, Profile]) -> list[Profile]:
    """The user profiles of `name`'s extends chain, base first (intents carry no load keys)."""
    chain: list[Profile] = []
    while name and name in profiles and profiles[name] not in chain:
        chain.insert(0, profiles[name])
        name = profiles[name].extends
    return chain


def _merge_load(base: LoadSettings, top: LoadSettings) -> LoadSettings:
    return LoadSettings(**{k: getattr(top, k) if getattr(top, k) is not None else getattr(base, k)
                           for k in LoadSettings.__dataclass_fields__})
