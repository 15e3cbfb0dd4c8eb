"""`mlxcel serve --config FILE`: read and check the YAML, build a FleetConfig.

gmlx's format (docs/config.md of asher/gmlx) for every key that applies to
llama.cpp; docs/config.md here lists where ours differs. Unknown keys and bad values
raise ConfigError, one line naming the file, the key path and the reason. gmlx keys
that cannot apply here fail the same way ("not supported by mlxcel: ..."), except
the client-side cosmetic blocks (theme, themes, talk, assistant), which only warn.
An entry whose GGUF is missing is dropped with a warning, as gmlx does."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import yaml

from mlxcel.fleet.config_values import CHANGE_KEYS, INT32_MAX, Checker
from mlxcel.fleet.entries import DEFAULT_TTL_S, FleetConfig, LoadSettings, ModelEntry, Profile
from mlxcel.fleet.entry_load import with_effective_load
from mlxcel.fleet.intents import FAMILY_NAMES, INTENTS
from mlxcel.fleet.yaml_file import parse_yaml
from mlxcel.models.catalog import CATALOG, KIND_CHAT, KIND_EMBEDDING, KIND_STT, KIND_TTS

TOP_KEYS = ("models", "aliases", "profiles", "rules", "server")
COSMETIC = {"theme": "the terminal chat's colors", "themes": "the terminal chat's colors",
            "talk": "the voice client", "assistant": "the assistant's tools and memory"}
UNSUPPORTED_TOP = {"discover": "list each model under `models` (no folder scan at start)"}
MODEL_KEYS = ("path", "profile", "profiles", "overrides", "family", "draft_gguf", "speculative", "pin", "ttl_s",
              "ctx_size", "parallel", "mmproj", "adapter")
_STREAMING = "streaming weights from disk is MLX-only; llama.cpp maps the GGUF (offload with -ngl)"
UNSUPPORTED_MODEL = {
    "native_mtp": "llama.cpp's MTP heads are not used; set `draft_gguf`",
    "speculative_width_cap": "the drafter runs at every batch width",
    "stream": _STREAMING, "cpu_moe": _STREAMING, "moe_experts": _STREAMING, "moe_expert_mass": _STREAMING,
    "moe_miss_shed": _STREAMING, "moe_layer_shed": _STREAMING, "moe_prestage": _STREAMING,
    "prefill_feeder": _STREAMING, "decode_feeder": _STREAMING, "stream_fast_disk": _STREAMING,
}
SERVER_KEYS = ("host", "port", "api_key", "no_auth", "model_dirs", "budget_gb", "max_models", "cache", "defaults",
               "family_defaults", "embeddings", "rerank", "stt", "tts")
UNSUPPORTED_SERVER = {
    "hf_cache": "models come from the catalog or a GGUF path, never the Hugging Face cache",
    "systemone": "structured decisions need a DiffusionGemma model (MLX-only)",
    "assistants": "served assistants are not implemented",
    "assistant_allow_remote": "served assistants are not implemented",
    "cache_limit_gb": "MLX's buffer cache has no llama.cpp counterpart",
    "prefill_step_size": "use --batch-size / --ubatch-size",
    "dtype": "llama.cpp computes in the GGUF's types",
    "decode_prefill_ratio": "the engine's scheduler is not tunable here",
    "prefill_tick_ms": "the engine's scheduler is not tunable here",
    "token_queue_timeout_s": "not implemented",
    "stochastic_mtp": "llama.cpp's MTP heads are not used",
    "gpu_keepwarm": "MLX-only",
}
COSMETIC_SERVER = {"menubar": "the macOS menu bar app"}
DEFAULTS_KEYS = ("model", "ttl_s", "preload", "profile")
GB = 10**9


def load_fleet_config(path: Path) -> FleetConfig:
    """The checked configuration of `path`; ConfigError (one line) when it cannot be served."""
    path = Path(path)
    check = Checker(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        check.fail("", f"cannot read the file: {exc.__class__.__name__}: {exc}")
    try:
        data = parse_yaml(text, check)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        check.fail("", f"not valid YAML{where}: {getattr(exc, 'problem', None) or exc}")
    return _FileReader(check, path).read(check.mapping(data, "") if data is not None else {})


def read_fleet_data(path: Path, data: dict, **settings) -> FleetConfig:
    """A configuration given as data (the --models-dir scan) rather than a file, checked
    as a file's; `settings`: FleetConfig fields the data has no key for."""
    return dataclasses.replace(_FileReader(Checker(path), path).read(data), **settings)


class _FileReader:
    def __init__(self, check: Checker, path: Path) -> None:
        self.check = check
        self.folder = path.resolve().parent
        self.path = path

    def read(self, data: dict) -> FleetConfig:
        check = self.check
        for key in data:
            if key in COSMETIC:
                check.warn(key, f"ignored by mlxcel: it configures {COSMETIC[key]}, a gmlx client feature")
            elif key in UNSUPPORTED_TOP:
                check.fail(key, f"not supported by mlxcel: {UNSUPPORTED_TOP[key]}")
            elif key not in TOP_KEYS:
                check.unknown(key, key, TOP_KEYS)
        server = self._server(check.mapping(data.get("server"), "server"))
        profiles = self._profiles(check.mapping(data.get("profiles"), "profiles"))
        self.known = set(profiles) | (set(INTENTS) if server["family_defaults"] else set())
        self.profiles = profiles
        self._check_extends(profiles)
        if server["default_profile"] is not None:
            server["default_profile"] = self._known_profile(server["default_profile"], "server.defaults.profile")
        rules = self._rules(data.get("rules"))
        raw_models = check.mapping(data.get("models"), "models")
        if not raw_models:
            check.fail("models", "the file declares no model")
        models = {}
        for model_id, block in raw_models.items():
            entry = self._model(model_id, block, server, rules, profiles)
            if entry is not None:
                models[model_id] = entry
        aliases = self._aliases(check.mapping(data.get("aliases"), "aliases"), raw_models, models)
        default_model = self._default_model(server["defaults"].get("model"), raw_models, models, aliases)
        if not models:
            check.fail("models", "no model can be served: every entry's file is missing")
        return FleetConfig(
            path=self.path, models=models, aliases=aliases, profiles=profiles, rules=tuple(rules),
            default_model=default_model, default_profile=server["default_profile"], ttl_s=server["ttl_s"],
            preload=self._preload(server["defaults"].get("preload"), raw_models, models),
            budget_bytes=server["budget_bytes"], max_models=server["max_models"], model_dirs=server["model_dirs"],
            host=server["host"], port=server["port"], api_key=server["api_key"], no_auth=server["no_auth"],
            cache_enabled=server["cache_enabled"], family_defaults=server["family_defaults"],
            embeddings=server["embeddings"], rerank=server["rerank"], stt=server["stt"], tts=server["tts"],
        )

    # server
    def _server(self, block: dict) -> dict[str, Any]:
        check = self.check
        for key in block:
            where = f"server.{key}"
            if key in UNSUPPORTED_SERVER:
                check.fail(where, f"not supported by mlxcel: {UNSUPPORTED_SERVER[key]}")
            elif key in COSMETIC_SERVER:
                check.warn(where, f"ignored by mlxcel: it configures {COSMETIC_SERVER[key]}")
            elif key not in SERVER_KEYS:
                check.unknown(where, key, SERVER_KEYS)
        defaults = check.mapping(block.get("defaults"), "server.defaults")
        for key in defaults:
            if key not in DEFAULTS_KEYS:
                check.unknown(f"server.defaults.{key}", key, DEFAULTS_KEYS)
        cache = block.get("cache")
        cache = check.mapping(cache, "server.cache")
        for key in cache:
            if key != "enabled":
                check.warn(f"server.cache.{key}", "not applied by mlxcel: llama.cpp's prompt cache has no such "
                                                  "setting (ignored)")
        budget = check.number(block.get("budget_gb"), "server.budget_gb", positive=True)
        dirs = self._model_dirs(block.get("model_dirs"))
        self.model_dirs = dirs
        ttl = defaults.get("ttl_s", DEFAULT_TTL_S)
        default_profile = check.string(defaults.get("profile"), "server.defaults.profile")
        return {
            "host": check.string(block.get("host"), "server.host"),
            "port": check.integer(block.get("port"), "server.port", low=1, high=65535),
            "api_key": check.string(block.get("api_key"), "server.api_key"),
            "no_auth": check.boolean(block.get("no_auth", False), "server.no_auth"),
            "model_dirs": dirs,
            "budget_bytes": int(budget * GB) if budget is not None else None,
            "max_models": check.integer(block.get("max_models"), "server.max_models", low=1),
            "cache_enabled": (check.boolean(cache["enabled"], "server.cache.enabled")
                              if cache.get("enabled") is not None else None),
            "family_defaults": check.boolean(block.get("family_defaults", True), "server.family_defaults"),
            "defaults": defaults,
            "ttl_s": check.number(ttl, "server.defaults.ttl_s"),
            "default_profile": default_profile,
            "embeddings": self._service(block.get("embeddings"), "server.embeddings", KIND_EMBEDDING),
            "rerank": self._service(block.get("rerank"), "server.rerank", None),
            "stt": self._service(block.get("stt"), "server.stt", KIND_STT, folders=True),
            "tts": self._service(block.get("tts"), "server.tts", KIND_TTS, folders=True),
        }

    def _model_dirs(self, value: Any) -> tuple[Path, ...]:
        if value is None:
            return ()
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list):
            self.check.fail("server.model_dirs", f"must be a list of folders, not {type(value).__name__}")
        dirs = []
        for i, item in enumerate(items):
            folder = self.check.string(item, f"server.model_dirs[{i}]", optional=False)
            path = _expand(folder)
            dirs.append(path if path.is_absolute() else self.folder / path)
        return tuple(dirs)

    def _service(self, value: Any, key: str, kind: str | None, folders: bool = False) -> str | None:
        if value is None or value is False:
            return None
        if value is True:
            names = [name for name, entry in CATALOG.items() if kind and entry.kind == kind]
            if not names:
                self.check.fail(key, "the catalog has no default model for this service; name a GGUF")
            return names[0]
        name = self.check.string(value, key)
        if name in CATALOG:
            if kind and CATALOG[name].kind != kind:
                self.check.fail(key, f"`{name}` is a {CATALOG[name].kind} model, not {'a' if kind == KIND_TTS else 'an'} {kind} model")
            return name
        found = self._find_file(name, folders)
        if found is None:
            self.check.warn(key, f"the file {name} is missing ({self._searched()}): the service is off")
            return None
        return str(found)

    # profiles and rules
    def _profiles(self, block: dict) -> dict[str, Profile]:
        profiles = {}
        for name, value in block.items():
            self._name(name, f"profiles.{name}", "a profile name")
            profiles[name] = self.check.profile(value, f"profiles.{name}", name, base=self.folder)
        return profiles

    def _check_extends(self, profiles: dict[str, Profile]) -> None:
        for name, profile in profiles.items():
            if profile.extends is not None:
                self._known_profile(profile.extends, f"profiles.{name}.extends")
            chain, current = [name], profile
            while current is not None and current.extends is not None:
                if current.extends == current.name and current.name in INTENTS:
                    break  # a user profile that changes the built-in intent of its name
                if current.extends in chain:
                    self.check.fail(f"profiles.{name}.extends", f"cycle: {' -> '.join(chain + [current.extends])}")
                chain.append(current.extends)
                current = profiles.get(current.extends)

    def _known_profile(self, name: Any, key: str) -> str:
        name = self.check.string(name, key, optional=False)
        name = name.removeprefix("@")  # gmlx writes intents without the @; accept it with one too
        if name not in self.known:
            self.check.fail(key, f"unknown profile `{name}`; valid profiles: {', '.join(sorted(self.known))}")
        return name

    def _rules(self, value: Any) -> list[tuple[str, str]]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.check.fail("rules", "must be a list of {match, profile} mappings")
        rules = []
        for i, item in enumerate(value):
            key = f"rules[{i}]"
            block = self.check.mapping(item, key)
            for name in block:
                if name not in ("match", "profile"):
                    self.check.unknown(f"{key}.{name}", name, ("match", "profile"))
            pattern = self.check.string(block.get("match"), f"{key}.match", optional=False)
            rules.append((pattern, self._known_profile(block.get("profile"), f"{key}.profile")))
        return rules

    # models
    def _model(self, model_id: str, value: Any, server: dict, rules: list, profiles: dict) -> ModelEntry | None:
        check, key = self.check, f"models.{model_id}"
        self._name(model_id, key, "a model id")
        block = check.mapping(value, key) if value is not None else check.fail(key, "needs at least `path`")
        for name in block:
            if name in UNSUPPORTED_MODEL:
                check.fail(f"{key}.{name}", f"not supported by mlxcel: {UNSUPPORTED_MODEL[name]}")
            if name not in MODEL_KEYS:
                check.unknown(f"{key}.{name}", name, MODEL_KEYS)
        family = check.choice(block.get("family"), f"{key}.family", FAMILY_NAMES)
        profile = self._known_profile(block["profile"], f"{key}.profile") if block.get("profile") is not None else None
        changes = {}
        for name, change in check.mapping(block.get("profiles"), f"{key}.profiles").items():
            name = self._known_profile(name, f"{key}.profiles.{name}")
            changes[name] = check.profile(change, f"{key}.profiles.{name}", name, allowed=CHANGE_KEYS,
                                          base=self.folder)
        overrides = None
        if block.get("overrides") is not None:
            overrides = check.profile(block["overrides"], f"{key}.overrides", "overrides", allowed=CHANGE_KEYS,
                                      base=self.folder)
        draft = check.string(block.get("draft_gguf"), f"{key}.draft_gguf")
        speculative = check.boolean(block.get("speculative", False), f"{key}.speculative") or draft is not None
        if speculative and draft is None:
            check.fail(f"{key}.speculative", "not supported by mlxcel: speculative decoding needs `draft_gguf` "
                                             "(llama.cpp's MTP heads are not used)")
        # an explicit null or 0 turns the idle timeout off; absent: the server's
        ttl = (check.number(block["ttl_s"], f"{key}.ttl_s") or 0.0) if "ttl_s" in block else None
        own = LoadSettings(ctx_size=check.integer(block.get("ctx_size"), f"{key}.ctx_size", low=0, high=INT32_MAX),
                           parallel=check.integer(block.get("parallel"), f"{key}.parallel", low=1, high=256))
        path = self._model_path(block.get("path"), f"{key}.path", KIND_CHAT)
        draft_path = self._model_path(draft, f"{key}.draft_gguf", KIND_CHAT) if draft else None
        mmproj = check.string(block.get("mmproj"), f"{key}.mmproj")
        mmproj_path = self._find_file(mmproj) if mmproj else None
        if mmproj and mmproj_path is None:
            check.warn(f"{key}.mmproj", f"the file {mmproj} is missing ({self._searched()})")
        adapters = self._adapters(block.get("adapter"), f"{key}.adapter")
        if path is None or (draft and draft_path is None) or (mmproj and mmproj_path is None) or adapters is None:
            check.warn(key, "dropped: its file is missing; a request for it gets 404")
            return None
        entry = ModelEntry(id=model_id, path=path, profile=profile, profiles=changes, overrides=overrides,
                           family=family, draft=draft_path, speculative=speculative,
                           mmproj=str(mmproj_path) if mmproj_path else None, adapters=adapters,
                           pin=check.boolean(block.get("pin", False), f"{key}.pin"),
                           ttl_s=ttl)
        return with_effective_load(entry, server["default_profile"], rules, profiles, own)

    def _adapters(self, value: Any, key: str) -> tuple[str, ...] | None:
        """`adapter`: a LoRA adapter GGUF of the model, or a list of them (each applied
        with scale 1, as --lora; /lora-adapters?model= and a request's `lora` change
        that); None when one is missing."""
        names = value if isinstance(value, list) else [] if value is None else [value]
        found = []
        for n, name in enumerate(names):
            name = self.check.string(name, f"{key}[{n}]" if isinstance(value, list) else key, optional=False)
            path = self._find_file(name)
            if path is None:
                self.check.warn(key, f"the file {name} is missing ({self._searched()})")
                return None
            found.append(str(path))
        return tuple(found)

    def _model_path(self, value: Any, key: str, kind: str) -> str | None:
        name = self.check.string(value, key, optional=False)
        if name in CATALOG:
            if CATALOG[name].kind != kind:
                other = CATALOG[name].kind
                home = {KIND_STT: "server.stt", KIND_TTS: "server.tts"}.get(other, "server.embeddings")
                self.check.fail(key, f"`{name}` is an {other} model; name it under {home}")
            return name
        found = self._find_file(name)
        if found is None:
            self.check.warn(key, f"the file {name} is missing ({self._searched()})")
            return None
        return str(found)

    def _find_file(self, name: str, folders: bool = False) -> Path | None:
        """The file (or, for the audio models, the folder) `name` names, absolute or
        under the model folders or the config file's own folder."""
        path = _expand(name)
        found = (lambda p: p.exists()) if folders else (lambda p: p.is_file())
        if path.is_absolute():
            return path if found(path) else None
        for folder in (*self.model_dirs, self.folder):
            if found(folder / path):
                return (folder / path).resolve()
        return None

    def _searched(self) -> str:
        return "searched: " + ", ".join(str(f) for f in (*self.model_dirs, self.folder))

    def _name(self, name: Any, key: str, what: str) -> None:
        if not isinstance(name, str) or not name.strip():
            self.check.fail(key, f"{what} must be a non-empty string")
        if "@" in name:
            self.check.fail(key, f"{what} cannot contain `@` (it separates an id from a profile)")

    # aliases, the default, preloads
    def _aliases(self, block: dict, raw_models: dict, models: dict) -> dict[str, str]:
        self.raw_aliases = {k: v for k, v in block.items() if isinstance(v, str)}
        aliases = {}
        for alias, target in block.items():
            key = f"aliases.{alias}"
            self._name(alias, key, "an alias")
            if alias in raw_models:
                self.check.fail(key, "an alias cannot be a model id")
            target = self.check.string(target, key, optional=False)
            model_id, _, profile = target.rpartition("@") if "@" in target else (target, "", "")
            if profile:
                self._known_profile(profile, key)
            if model_id not in raw_models:
                self.check.fail(key, f"unknown model `{model_id}`; ids: {', '.join(sorted(raw_models))}")
            if model_id not in models:
                self.check.warn(key, f"dropped: its model `{model_id}` is missing")
                continue
            aliases[alias] = target
        return aliases

    def _default_model(self, value: Any, raw_models: dict, models: dict, aliases: dict) -> str | None:
        name = self.check.string(value, "server.defaults.model")
        if name is None:
            return None
        target = self.raw_aliases.get(name, name)
        model_id = target.rpartition("@")[0] if "@" in target else target
        if name not in raw_models and name not in self.raw_aliases:
            self.check.fail("server.defaults.model", f"unknown model `{name}`; ids: {', '.join(sorted(raw_models))}")
        if model_id not in models:
            self.check.fail("server.defaults.model", f"the default model `{name}` is missing (its file is not found)")
        return name

    def _preload(self, value: Any, raw_models: dict, models: dict) -> tuple[str, ...]:
        if value is None:
            return ()
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list):
            self.check.fail("server.defaults.preload", "must be a list of model ids, or `all`")
        if "all" in items:
            return tuple(models)
        preload = []
        for i, item in enumerate(items):
            name = self.check.string(item, f"server.defaults.preload[{i}]", optional=False)
            if name not in raw_models:
                self.check.fail(f"server.defaults.preload[{i}]",
                                f"unknown model `{name}`; ids: {', '.join(sorted(raw_models))}")
            if name in models:
                preload.append(name)
        return tuple(preload)


def _expand(name: str) -> Path:
    return Path(os.path.expandvars(os.path.expanduser(name)))
