"""What a --config file declares, as plain frozen dataclasses. The loader
(mlxcel.fleet.config_file) checks the YAML and builds these; everything else reads
them. Field names follow gmlx's configuration format where a key applies."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_TTL_S = 900.0


@dataclass(frozen=True)
class LoadSettings:
    """Keys that change how a model is built: two ids that differ here are two loaded copies."""

    ctx_size: int | None = None  # gmlx load.max_kv_size, or our models.*.ctx_size: the total context
    parallel: int | None = None  # slots (decode width); None: the server's -np
    cache_type_k: str | None = None  # from gmlx load.kv_bits (8 -> q8_0, 4 -> q4_0), or load.cache_type_k
    cache_type_v: str | None = None
    flash_attn: str | None = None


@dataclass(frozen=True)
class Profile:
    """A named set of request defaults (gmlx's `profiles.*`)."""

    name: str
    extends: str | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)  # request-field defaults (temperature, max_tokens, stop, ...)
    system: str | None = None  # applies only when the request has no system message
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    thinking: str | None = None  # on | off | adaptive
    reasoning_effort: str | None = None
    load: LoadSettings = field(default_factory=LoadSettings)
    chat_template: str | None = None  # applies at load


@dataclass(frozen=True)
class ModelEntry:
    id: str
    path: str  # a catalog name, or a GGUF path (absolute, or found under server.model_dirs)
    profile: str | None = None  # the profile a request naming none gets
    profiles: Mapping[str, Profile] = field(default_factory=dict)  # per-model changes to named profiles
    overrides: Profile | None = None  # wins over every profile, below the request
    family: str | None = None  # None: detected from the GGUF header (general.architecture)
    draft: str | None = None  # gmlx draft_gguf: a drafter (catalog name or GGUF path)
    mmproj: str | None = None  # a multimodal projector GGUF (images, audio), as --mmproj
    adapters: tuple[str, ...] = ()  # LoRA adapter GGUFs, as --lora
    speculative: bool = False
    pin: bool = False
    ttl_s: float | None = None  # None: server.defaults.ttl_s; 0: never idles out
    load: LoadSettings = field(default_factory=LoadSettings)  # the effective load keys (profile + overrides)
    chat_template: str | None = None  # the effective template override (profile + overrides)

    def load_key(self) -> tuple:
        """Everything a reload compares: an entry whose key is unchanged keeps its loaded copy."""
        return (self.path, self.draft, self.speculative, self.load, self.chat_template, self.mmproj, self.adapters)


@dataclass(frozen=True)
class FleetConfig:
    path: Path  # the file read
    models: Mapping[str, ModelEntry]
    aliases: Mapping[str, str] = field(default_factory=dict)  # alias -> "id" or "id@profile"
    profiles: Mapping[str, Profile] = field(default_factory=dict)  # user profiles (intents are built in)
    rules: tuple[tuple[str, str], ...] = ()  # (shell pattern on ids, profile), first match wins
    default_model: str | None = None  # server.defaults.model; None: the sole model, if one
    default_profile: str | None = None  # server.defaults.profile
    ttl_s: float | None = DEFAULT_TTL_S  # server.defaults.ttl_s; None or 0: no idle timeout
    preload: tuple[str, ...] = ()  # server.defaults.preload ("all" expanded)
    budget_bytes: int | None = None  # server.budget_gb; None: 0.8 x the host's memory
    max_models: int | None = None  # server.max_models
    model_dirs: tuple[Path, ...] = ()
    host: str | None = None  # server.host / server.port / server.api_key (flags win)
    port: int | None = None
    api_key: str | None = None
    no_auth: bool = False  # server.no_auth: a non-loopback host without api_key
    family_defaults: bool = True  # server.family_defaults: false turns the intents off
    autoload: bool = True  # --no-models-autoload: a request does not load its model (POST /v1/keep does)
    from_models_dir: bool = False  # --models-dir: `path` is the folder, scanned again on /v1/reload
    # llama-server's router `source` of each model: "models_dir" or "preset" (the default: a section, a YAML entry)
    sources: Mapping[str, str] = field(default_factory=dict)
    # /v1/reload's reading (--models-preset: the INI file and the folder again); None: `path` as YAML
    reread: Callable[[], FleetConfig] | None = field(default=None, compare=False)
    cache_enabled: bool | None = None  # server.cache.enabled (the prompt cache)
    embeddings: str | None = None  # service roles: a catalog name or a GGUF path
    rerank: str | None = None
    stt: str | None = None
    tts: str | None = None
