"""llama-server's model presets (--models-preset FILE.ini): a section per model, its
keys llama-server's flags without dashes (`c = 4096`, `ctx-size = 4096`,
`LLAMA_ARG_CTX_SIZE = 4096`), a `[*]` section for every model, `version = 1` on top.

A section names a model of --models-dir (its options added to it) or gives its own
`model`; relative paths are the server's working directory's, as llama-server reads
them. Precedence is llama-server's: a flag given on the command line wins over the
preset's value, a model's section over `[*]`. The keys that set what mlxcel sets per
model are taken (the model and its projector, draft model and LoRA adapters, context
size, slots, KV cache types, attention kernel, chat template and its variables,
sampling defaults, `load-on-startup`); those the router controls are dropped, as
llama-server drops them (host, port, keys, alias, downloads); flags that only tune how
llama.cpp runs (threads, GPU layers, batch sizes, memory locking, ...) run as the
command line sets them for every model, and are named in one warning line; any other
key stops the start in one line naming it, rather than serve the model otherwise than
asked."""

from __future__ import annotations

import configparser
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlxcel.chat.template_kwargs import parse_kwargs_json
from mlxcel.fleet.config_file import read_fleet_data
from mlxcel.fleet.entries import FleetConfig
from mlxcel.fleet.errors import ConfigError
from mlxcel.fleet.models_dir import scan_models_dir

log = logging.getLogger("mlxcel.fleet")
_TRUE = {"1", "true", "yes", "on", "enabled"}
_FALSE = {"0", "false", "no", "off", "disabled"}


@dataclass(frozen=True)
class Key:
    names: tuple[str, ...]  # the flag's forms without dashes, and its environment variable
    place: tuple[str, ...]  # where the value goes in the model's block
    read: Callable[[str], Any] = str


def _path(value: str) -> str:
    return str(Path(value).expanduser().resolve())


def _flag(value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise ValueError(f"expected true or false, not {value!r}")


def _slots(value: str) -> int:
    slots = int(value)
    if slots < 0:  # llama-server's auto: 4 slots on one shared KV pool
        raise ValueError("-1 (llama-server's auto: 4 slots sharing one KV pool) is not served per model here, "
                         "where each model's slots split its context: give a slot count")
    return slots


KEYS = [
    Key(("model", "m", "LLAMA_ARG_MODEL"), ("path",), _path),
    Key(("mmproj", "mm", "LLAMA_ARG_MMPROJ"), ("mmproj",), _path),
    Key(("model-draft", "md", "spec-draft-model", "LLAMA_ARG_SPEC_DRAFT_MODEL", "LLAMA_ARG_MODEL_DRAFT"),
        ("draft_gguf",), _path),
    Key(("lora", "LLAMA_ARG_LORA"), ("adapter",), lambda v: [_path(p) for p in v.split(",") if p.strip()]),
    Key(("ctx-size", "c", "LLAMA_ARG_CTX_SIZE"), ("ctx_size",), int),
    Key(("parallel", "np", "LLAMA_ARG_N_PARALLEL"), ("parallel",), _slots),
    Key(("cache-type-k", "ctk", "LLAMA_ARG_CACHE_TYPE_K"), ("overrides", "load", "cache_type_k")),
    Key(("cache-type-v", "ctv", "LLAMA_ARG_CACHE_TYPE_V"), ("overrides", "load", "cache_type_v")),
    Key(("flash-attn", "fa", "LLAMA_ARG_FLASH_ATTN"), ("overrides", "load", "flash_attn")),
    Key(("chat-template", "LLAMA_ARG_CHAT_TEMPLATE"), ("overrides", "chat_template")),
    Key(("chat-template-file", "LLAMA_ARG_CHAT_TEMPLATE_FILE"), ("overrides", "chat_template"), _path),
    Key(("chat-template-kwargs", "LLAMA_ARG_CHAT_TEMPLATE_KWARGS"), ("overrides", "chat_template_kwargs"),
        parse_kwargs_json),
    Key(("temp", "temperature", "LLAMA_ARG_TEMPERATURE", "LLAMA_ARG_TEMP"), ("overrides", "sampling", "temperature"),
        float),
    Key(("top-k", "LLAMA_ARG_TOP_K"), ("overrides", "sampling", "top_k"), int),
    Key(("top-p", "LLAMA_ARG_TOP_P"), ("overrides", "sampling", "top_p"), float),
    Key(("min-p", "LLAMA_ARG_MIN_P"), ("overrides", "sampling", "min_p"), float),
    Key(("typical", "typical-p", "LLAMA_ARG_TYPICAL_P"), ("overrides", "sampling", "typical_p"), float),
    Key(("repeat-penalty", "LLAMA_ARG_REPEAT_PENALTY"), ("overrides", "sampling", "repeat_penalty"), float),
    Key(("repeat-last-n", "LLAMA_ARG_REPEAT_LAST_N"), ("overrides", "sampling", "repeat_last_n"), int),
    Key(("presence-penalty", "LLAMA_ARG_PRESENCE_PENALTY"), ("overrides", "sampling", "presence_penalty"), float),
    Key(("frequency-penalty", "LLAMA_ARG_FREQUENCY_PENALTY"), ("overrides", "sampling", "frequency_penalty"),
        float),
    Key(("seed", "s", "LLAMA_ARG_SEED"), ("overrides", "sampling", "seed"), int),
    Key(("n-predict", "n", "predict", "LLAMA_ARG_N_PREDICT"), ("overrides", "sampling", "max_tokens"), int),
    Key(("load-on-startup",), ("load_on_startup",), _flag),
]
BY_NAME = {name: key for key in KEYS for name in key.names}
# the router's own (llama-server removes or overwrites them in a preset), and options of
# llama-server's router process that have no meaning for a model here
# tuning flags mlxcel implements server-wide (llama-server's other tuning flags are
# found by the command line's own split, the caller's `is_tuning`)
TUNING = {"n-gpu-layers", "ngl", "gpu-layers", "threads", "t", "threads-batch", "tb", "batch-size", "b",
          "ubatch-size", "ub", "mlock", "mmap", "no-mmap", "main-gpu", "mg", "tensor-split", "ts", "split-mode", "sm",
          "kv-unified", "kvu", "no-kv-unified", "swa-full", "warmup", "no-warmup", "cache-ram", "cram",
          "cont-batching", "cb", "no-cont-batching", "nocb", "fit", "no-fit"}
DROPPED = {"host", "port", "api-key", "api-key-file", "alias", "a", "hf-repo", "hf", "hfr", "hf-file", "hff",
           "hf-token", "hft", "models-dir", "models-preset", "models-max", "models-autoload", "no-models-autoload",
           "stop-timeout", "dedup-cache-models", "jinja", "no-webui", "webui", "LLAMA_ARG_HOST", "LLAMA_ARG_PORT",
           "LLAMA_API_KEY", "LLAMA_ARG_ALIAS", "LLAMA_ARG_HF_REPO"}


def _read_ini(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True, comment_prefixes=(";", "#"),
                                       inline_comment_prefixes=None, empty_lines_in_values=False)
    parser.optionxform = str  # keys as written: environment variable names are upper case
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--models-preset {path}: cannot read it: {exc}") from None
    try:
        parser.read_string("[__top__]\n" + text, source=str(path))  # `version = 1` sits above every section
    except configparser.Error as exc:
        raise ConfigError(f"--models-preset {path}: not a valid INI file: {' '.join(str(exc).split())}") from None
    return parser


def _flag_forms(key: Key) -> set[str]:
    return {flag_of(name) for name in key.names if not name.isupper()}


def flag_of(name: str) -> str:
    """The command-line form of a preset key (`c`: -c, `ctx-size`: --ctx-size)."""
    return ("-" if len(name) <= 3 else "--") + name


def _model_block(path: Path, section: str, options: dict[str, str], explicit_flags: set[str],
                 tuned: set[str], is_tuning: Callable[[str], bool]) -> dict:
    block: dict[str, Any] = {}
    for name, value in options.items():
        where = f"--models-preset {path}: [{section}] {name}"
        bare = name.lstrip("-")
        if bare in DROPPED:
            continue
        key = BY_NAME.get(bare)
        if key is None and (bare in TUNING or is_tuning(flag_of(bare))):
            tuned.add(bare)
            continue
        if key is None:
            raise ConfigError(f"{where}: not supported in a preset by mlxcel (its per-model keys: "
                              f"{', '.join(k.names[0] for k in KEYS)}); give it on the command line instead")
        if _flag_forms(key) & explicit_flags:
            continue  # the command line wins, as in llama-server
        try:
            parsed = key.read(value.strip())
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        place = block
        for step in key.place[:-1]:
            place = place.setdefault(step, {})
        place[key.place[-1]] = parsed
    return block


def models_preset_fleet(preset: str | Path, models_dir: str | None, models_max: int, autoload: bool,
                        explicit_flags: set[str], is_tuning: Callable[[str], bool] = lambda flag: False) -> FleetConfig:
    """The fleet of a preset file (and of --models-dir, when given too); ConfigError
    (one line) when a key or value cannot be served. `is_tuning(flag)`: whether a
    llama-server flag only tunes how llama.cpp runs."""
    path = Path(preset).expanduser().resolve()
    parser = _read_ini(path)
    models: dict[str, dict] = scan_models_dir(Path(models_dir).expanduser().resolve()) if models_dir else {}
    shared = {k: v for k, v in parser["*"].items()} if parser.has_section("*") else {}
    preload: list[str] = []
    tuned: set[str] = set()
    for section in parser.sections():
        if section in ("__top__", "*"):
            continue
        block = _model_block(path, section, {**shared, **parser[section]}, explicit_flags, tuned, is_tuning)
        if block.pop("load_on_startup", False):
            preload.append(section)
        base = models.get(section, {})
        if "path" not in block and "path" not in base:
            raise ConfigError(f"--models-preset {path}: [{section}] names no model of --models-dir and sets no "
                              "`model` path")
        overrides = {**base.get("overrides", {}), **block.pop("overrides", {})}
        models[section] = {**base, **block, **({"overrides": overrides} if overrides else {})}
    if not models:
        raise ConfigError(f"--models-preset {path}: no model section")
    if tuned:
        log.warning("--models-preset %s: tuning keys run as the command line sets them, for every model: %s",
                    path.name, ", ".join(sorted(tuned)))
    server: dict = {"defaults": {"ttl_s": 0, **({"preload": preload} if preload else {})}}
    if models_max > 0:
        server["max_models"] = models_max
    fleet = read_fleet_data(path, {"models": models, "server": server}, autoload=autoload,
                            reread=lambda: models_preset_fleet(path, models_dir, models_max, autoload, explicit_flags,
                                                               is_tuning))
    sections = set(parser.sections()) - {"__top__", "*"}
    return dataclasses.replace(fleet, sources={model_id: "preset" if model_id in sections else "models_dir"
                                               for model_id in fleet.models})
