"""Checked values of a --config file: scalars, and the blocks a profile is made of
(sampling, load, cache, the prompt keys). Every failure is a ConfigError of one line
naming the file, the key path and the reason; `sampling`, `load` and `cache` keys
that are unknown or do not apply only warn (as gmlx does)."""

from __future__ import annotations

import difflib
import logging
import math
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from mlxcel.chat.template_kwargs import settable_problem
from mlxcel.fleet.entries import LoadSettings, Profile
from mlxcel.fleet.errors import ConfigError
from mlxcel.turn.sampling_fields import INT32_MAX, SamplingFields

log = logging.getLogger("mlxcel.fleet")

# the KV cache types llama.cpp takes for -ctk / -ctv (mlxcel.engine.llama_runtime.CACHE_TYPES)
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
KV_BITS = {8: "q8_0", 4: "q4_0"}
FLASH_ATTN = ("on", "off", "auto")
THINKING = ("on", "off", "adaptive")

# sampling keys a profile may set, checked as SamplingFields checks the request field
SAMPLING_FIELD_KEYS = (
    "temperature", "top_k", "top_p", "min_p", "typical_p", "repeat_penalty", "repetition_penalty", "repeat_last_n",
    "repetition_context_size", "frequency_penalty", "presence_penalty", "top_n_sigma", "p_less", "dry_multiplier",
    "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers", "xtc_probability",
    "xtc_threshold", "dynatemp_range", "dynatemp_exponent", "mirostat", "mirostat_tau", "mirostat_eta", "min_keep",
    "seed", "stop", "ignore_eos",
)
# and the ones checked here: output caps and the thinking controls
OWN_SAMPLING_KEYS = ("max_tokens", "enable_thinking", "thinking_budget")
SAMPLING_ALIASES = {"temp": "temperature"}
# gmlx sampling keys with no effect here: a warning names why
SAMPLING_NOT_APPLIED = {
    "thinking_start_token": "reasoning markers come from the chat template",
    "thinking_end_token": "reasoning markers come from the chat template",
    "presence_context_size": "llama.cpp's penalties share one window (repetition_context_size)",
    "frequency_context_size": "llama.cpp's penalties share one window (repetition_context_size)",
}
LOAD_KEYS = ("max_kv_size", "ctx_size", "kv_bits", "kv_quant_scheme", "cache_type_k", "cache_type_v", "flash_attn",
             "parallel")
LOAD_NOT_APPLIED = {
    "kv_group_size": "llama.cpp's q8_0 and q4_0 caches quantize in fixed blocks of 32",
    "kv_tail_tokens": "it belongs to kvarn, which mlxcel does not have",
    "quantized_kv_start": "llama.cpp quantizes the whole cache",
}
PROFILE_KEYS = ("extends", "sampling", "load", "cache", "system", "chat_template", "chat_template_kwargs", "thinking",
                "reasoning_effort")
CHANGE_KEYS = tuple(k for k in PROFILE_KEYS if k != "extends")  # models.*.profiles.* and models.*.overrides


class Checker:
    """Raises the one-line errors and logs the warnings of one file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.warnings: list[str] = []

    def fail(self, key: str, reason: str) -> NoReturn:
        reason = " ".join(str(reason).split())
        raise ConfigError(f"{self.path}: `{key}`: {reason}" if key else f"{self.path}: {reason}")

    def warn(self, key: str, reason: str) -> None:
        line = f"{self.path}: `{key}`: {reason}"
        self.warnings.append(line)
        log.warning("%s", line)

    def unknown(self, key: str, name: str, known: tuple[str, ...] | list[str], *, warn: bool = False) -> None:
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
        reason = f"unknown key; did you mean `{close[0]}`?" if close else f"unknown key; valid keys: {', '.join(known)}"
        if warn:
            self.warn(key, reason + " (ignored)")
        else:
            self.fail(key, reason)

    # scalars
    def mapping(self, value: Any, key: str) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(key, f"must be a mapping, not {_kind(value)}")
        for name in value:
            if not isinstance(name, str):
                self.fail(f"{key}.{name}" if key else str(name), "keys must be strings")
        return value

    def string(self, value: Any, key: str, *, optional: bool = True) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value:
            self.fail(key, f"must be a non-empty string, not {_kind(value)}")
        return value

    def boolean(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, not {_kind(value)}")
        return value

    def integer(self, value: Any, key: str, low: int | None = None, high: int | None = None,
                optional: bool = True) -> int | None:
        if value is None and optional:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(key, f"must be an integer, not {_kind(value)}")
        if (low is not None and value < low) or (high is not None and value > high):
            self.fail(key, f"must be {_range(low, high)}, not {value}")
        return value

    def number(self, value: Any, key: str, *, positive: bool = False, optional: bool = True) -> float | None:
        if value is None and optional:
            return None
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            self.fail(key, f"must be a number, not {_kind(value)}")
        if value < 0 or (positive and value == 0):
            self.fail(key, f"must be {'above' if positive else 'at least'} 0, not {value}")
        return float(value)

    def choice(self, value: Any, key: str, choices: tuple[str, ...]) -> str | None:
        if value is None:
            return None
        if value not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}, not {value!r}")
        return value

    # the blocks of a profile
    def sampling(self, value: Any, key: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, item in self.mapping(value, key).items():
            where = f"{key}.{name}"
            name = SAMPLING_ALIASES.get(name, name)
            if name in SAMPLING_NOT_APPLIED:
                self.warn(where, f"not applied by mlxcel: {SAMPLING_NOT_APPLIED[name]} (ignored)")
            elif name in SAMPLING_FIELD_KEYS:
                out[name] = self._sampling_field(name, item, where)
            elif name == "max_tokens":
                out[name] = self.integer(item, where, low=1, optional=False)
            elif name == "thinking_budget":
                out[name] = self.integer(item, where, low=-1, optional=False)
            elif name == "enable_thinking":
                out[name] = self.boolean(item, where)
            else:
                self.unknown(where, name, SAMPLING_FIELD_KEYS + OWN_SAMPLING_KEYS, warn=True)
        return out

    def _sampling_field(self, name: str, value: Any, where: str) -> Any:
        if value is None:
            self.fail(where, "must have a value (leave the key out for none)")
        try:
            fields = SamplingFields.model_validate({name: value})
        except ValidationError as exc:
            self.fail(where, exc.errors()[0]["msg"])
        return getattr(fields, name)

    def load(self, value: Any, key: str) -> LoadSettings:
        block = self.mapping(value, key)
        for name in block:
            if name in LOAD_NOT_APPLIED:
                self.warn(f"{key}.{name}", f"not applied by mlxcel: {LOAD_NOT_APPLIED[name]} (ignored)")
            elif name not in LOAD_KEYS:
                self.unknown(f"{key}.{name}", name, LOAD_KEYS, warn=True)
        scheme = block.get("kv_quant_scheme")
        if scheme == "kvarn":
            self.fail(f"{key}.kv_quant_scheme", "not supported by mlxcel: kvarn is MLX-only; llama.cpp quantizes the "
                                                "KV cache with kv_bits 8 or 4 (q8_0, q4_0)")
        self.choice(scheme, f"{key}.kv_quant_scheme", ("uniform",))
        cache_k, cache_v = block.get("cache_type_k"), block.get("cache_type_v")
        bits = block.get("kv_bits")
        if bits is not None:
            if not isinstance(bits, int) or isinstance(bits, bool) or bits not in KV_BITS:
                self.fail(f"{key}.kv_bits", f"must be 8 or 4 (llama.cpp's q8_0 and q4_0 caches), not {bits!r}")
            if cache_k is not None or cache_v is not None:
                self.fail(f"{key}.kv_bits", "set either kv_bits or cache_type_k / cache_type_v, not both")
            cache_k = cache_v = KV_BITS[bits]
        ctx = self.integer(block.get("max_kv_size"), f"{key}.max_kv_size", low=1, high=INT32_MAX)
        own_ctx = self.integer(block.get("ctx_size"), f"{key}.ctx_size", low=0, high=INT32_MAX)
        if ctx is not None and own_ctx is not None and ctx != own_ctx:
            self.fail(f"{key}.ctx_size", f"disagrees with max_kv_size ({ctx}); set one of them")
        return LoadSettings(
            ctx_size=own_ctx if own_ctx is not None else ctx,
            parallel=self.integer(block.get("parallel"), f"{key}.parallel", low=1, high=256),
            cache_type_k=self.choice(cache_k, f"{key}.cache_type_k", CACHE_TYPES),
            cache_type_v=self.choice(cache_v, f"{key}.cache_type_v", CACHE_TYPES),
            flash_attn=self._flash_attn(block.get("flash_attn"), f"{key}.flash_attn"),
        )

    def _flash_attn(self, value: Any, key: str) -> str | None:
        if isinstance(value, bool):  # YAML reads a bare on / off as a boolean
            value = "on" if value else "off"
        return self.choice(value, key, FLASH_ATTN)

    def cache(self, value: Any, key: str) -> None:
        for name in self.mapping(value, key):
            self.warn(f"{key}.{name}", "not applied by mlxcel: the prompt cache is set per server "
                                       "(server.cache.enabled, --cache-prompt) (ignored)")

    def thinking(self, value: Any, key: str) -> str | None:
        if isinstance(value, bool):  # YAML reads a bare on / off as a boolean
            value = "on" if value else "off"
        return self.choice(value, key, THINKING)

    def profile(self, value: Any, key: str, name: str, *, allowed: tuple[str, ...] = PROFILE_KEYS,
                base: Path | None = None) -> Profile:
        block = self.mapping(value, key)
        for item in block:
            if item not in allowed:
                if item in PROFILE_KEYS:
                    self.fail(f"{key}.{item}", "not allowed here")
                self.unknown(f"{key}.{item}", item, allowed)
        if "cache" in block:
            self.cache(block["cache"], f"{key}.cache")
        kwargs = self.mapping(block.get("chat_template_kwargs"), f"{key}.chat_template_kwargs")
        reserved = settable_problem(kwargs, "chat_template_kwargs")
        if reserved:
            self.fail(f"{key}.chat_template_kwargs", reserved)
        template = self.string(block.get("chat_template"), f"{key}.chat_template")
        extends = self.string(block.get("extends"), f"{key}.extends")
        return Profile(
            name=name,
            extends=extends.removeprefix("@") if extends else None,  # gmlx names intents without the @
            sampling=self.sampling(block.get("sampling"), f"{key}.sampling"),
            system=self._system(block.get("system"), f"{key}.system"),
            chat_template_kwargs=dict(kwargs),
            thinking=self.thinking(block.get("thinking"), f"{key}.thinking"),
            reasoning_effort=self.string(block.get("reasoning_effort"), f"{key}.reasoning_effort"),
            load=self.load(block.get("load"), f"{key}.load"),
            chat_template=self._template(template, f"{key}.chat_template", base) if template else None,
        )

    def _system(self, value: Any, key: str) -> str | None:
        if value is not None and not isinstance(value, str):
            self.fail(key, f"must be a string, not {_kind(value)}")
        return value

    def _template(self, value: str, key: str, base: Path | None) -> str:
        """Inline Jinja, or the text of a .jinja / .txt file (relative: to the config's folder)."""
        if "{" in value or not value.endswith((".jinja", ".txt")):
            return value
        path = Path(value).expanduser()
        path = path if path.is_absolute() or base is None else base / path
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.fail(key, f"cannot read the template file {path}: {exc.__class__.__name__}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: f"the string {value!r}",
            list: "a list", dict: "a mapping"}.get(type(value), type(value).__name__)


def _range(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"from {low} to {high}"
    return f"at least {low}" if low is not None else f"at most {high}"
