"""The built-in intents (`@coding`, `@instruct`, ...) and the model families they
resolve for.

A family has base values (its publisher's recommended sampling) and per-intent
changes to them. An intent resolves, for a model, to its family's base values with
the intent's changes on top; an intent a family does not define gives the base.
Unlike gmlx, mlxcel applies a family's values ONLY when a request's profile is (or
extends) an intent: a request without one samples exactly as llama-server would, so
a model served here answers as it does served alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INTENTS = ("coding", "instruct", "creative", "reasoning-low", "reasoning-medium", "reasoning-high",
           "reasoning-max", "reasoning-xhigh")
DEFAULT_FAMILY = "default"


@dataclass(frozen=True)
class IntentValues:
    """What an intent means for one family: sampling defaults and the reasoning controls."""

    sampling: dict[str, Any] = field(default_factory=dict)
    thinking: str | None = None  # on | off
    reasoning_effort: str | None = None


@dataclass(frozen=True)
class Family:
    name: str
    archs: tuple[str, ...]  # GGUF general.architecture values it covers
    base: dict[str, Any]
    intents: dict[str, IntentValues] = field(default_factory=dict)
    thinking_kwarg: str | None = "enable_thinking"  # the template variable `thinking` maps to; None: not switchable
    source: str = ""  # where the values come from


def _effort(level: str, base: dict) -> IntentValues:
    return IntentValues(sampling=dict(base), reasoning_effort=level)


_QWEN25 = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
_QWEN3 = {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0}
_GEMMA = {"temperature": 1.0, "top_p": 0.95, "top_k": 64}
_SMOLLM = {"temperature": 0.2, "top_p": 0.9}
_LLAMA = {"temperature": 0.6, "top_p": 0.9}
_GPT_OSS = {"temperature": 1.0, "top_p": 1.0}
_DEFAULT = {"temperature": 0.7, "top_p": 0.95}

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("smollm", (), _SMOLLM, {
        "creative": IntentValues({"temperature": 0.8, "top_p": 0.95, "min_p": 0.05}),
    }, source="SmolLM2 model card (temperature 0.2, top_p 0.9)"),
    Family("llama", ("llama", "smollm3"), _LLAMA, {
        "coding": IntentValues({**_LLAMA, "temperature": 0.2}),
        "creative": IntentValues({"temperature": 0.9, "top_p": 0.95, "min_p": 0.05}),
    }, source="Meta Llama generation_config (temperature 0.6, top_p 0.9)"),
    Family("qwen2.5", ("qwen2", "qwen2moe"), _QWEN25, {
        "coding": IntentValues({**_QWEN25, "temperature": 0.3}),
        "creative": IntentValues({**_QWEN25, "temperature": 1.0, "top_p": 0.95}),
    }, source="Qwen2.5 / Qwen2.5-Coder generation_config"),
    Family("qwen3", ("qwen3", "qwen3moe"), _QWEN3, {
        "instruct": IntentValues({"temperature": 0.7, "top_p": 0.8, "top_k": 20, "min_p": 0.0}, thinking="off"),
        "reasoning-low": IntentValues(dict(_QWEN3), thinking="on"),
        "reasoning-medium": IntentValues(dict(_QWEN3), thinking="on"),
        "reasoning-high": IntentValues(dict(_QWEN3), thinking="on"),
    }, source="Qwen3 model card (thinking and non-thinking modes)"),
    Family("gemma", ("gemma", "gemma2", "gemma3", "gemma3n"), _GEMMA, {
        "coding": IntentValues({**_GEMMA, "temperature": 0.3}),
    }, thinking_kwarg=None, source="Gemma 3 model card (temperature 1.0, top_k 64, top_p 0.95)"),
    Family("gpt-oss", ("gpt-oss",), _GPT_OSS, {
        "reasoning-low": _effort("low", _GPT_OSS),
        "reasoning-medium": _effort("medium", _GPT_OSS),
        "reasoning-high": _effort("high", _GPT_OSS),
    }, thinking_kwarg=None, source="gpt-oss model card (temperature 1.0, top_p 1.0)"),
    Family(DEFAULT_FAMILY, (), _DEFAULT, {
        "coding": IntentValues({"temperature": 0.3, "top_p": 0.95}),
        "creative": IntentValues({"temperature": 1.0, "top_p": 0.95, "min_p": 0.05}),
        "instruct": IntentValues({"temperature": 0.7, "top_p": 0.95}),
    }, source="mlxcel's choice for architectures no family claims"),
)}

_BY_ARCH = {arch: family.name for family in FAMILIES.values() for arch in family.archs}


def family_from_metadata(meta: dict[str, Any]) -> str:
    """The family of a GGUF from its header: SmolLM by name (its architecture is
    `llama`), else by general.architecture, else the default family."""
    arch = meta.get("general.architecture")
    names = " ".join(str(meta.get(k) or "") for k in ("general.name", "general.basename")).lower()
    if arch == "llama" and "smollm" in names:
        return "smollm"
    return _BY_ARCH.get(arch, DEFAULT_FAMILY) if isinstance(arch, str) else DEFAULT_FAMILY


def family(name: str | None) -> Family:
    return FAMILIES.get(name or DEFAULT_FAMILY, FAMILIES[DEFAULT_FAMILY])


def intent_values(intent: str, family_name: str | None) -> IntentValues:
    """The intent as `family_name` defines it (its base values when it defines none)."""
    if intent not in INTENTS:
        raise KeyError(intent)
    fam = family(family_name)
    values = fam.intents.get(intent)
    if values is None:
        return IntentValues(sampling=dict(fam.base))
    return IntentValues({**fam.base, **values.sampling}, values.thinking, values.reasoning_effort)


FAMILY_NAMES = tuple(sorted(FAMILIES))
