"""Model metadata overrides (llama-server's --override-kv KEY=TYPE:VALUE): values
llama.cpp reads instead of the GGUF's own while it loads the model."""

from __future__ import annotations

import math
from dataclasses import dataclass

import llama_cpp

KEY_MAX = 127  # llama_model_kv_override.key holds 128 bytes with its NUL
STR_MAX = 127

_TAGS = {"int": llama_cpp.LLAMA_KV_OVERRIDE_TYPE_INT, "float": llama_cpp.LLAMA_KV_OVERRIDE_TYPE_FLOAT,
         "bool": llama_cpp.LLAMA_KV_OVERRIDE_TYPE_BOOL, "str": llama_cpp.LLAMA_KV_OVERRIDE_TYPE_STR}
_INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True)
class KvOverride:
    key: str
    kind: str  # int | float | bool | str
    value: int | float | bool | str


def parse_kv_override(text: str) -> KvOverride:
    """KEY=int:N, KEY=float:X, KEY=bool:true|false or KEY=str:TEXT; a ValueError says
    what is wrong."""
    key, sep, typed = text.partition("=")
    if not sep or not key:
        raise ValueError(f"malformed KV override {text!r} (KEY=TYPE:VALUE)")
    if len(key.encode()) > KEY_MAX:
        raise ValueError(f"KV override key {key[:40]!r}... is longer than {KEY_MAX} bytes")
    kind, sep, raw = typed.partition(":")
    if not sep or kind not in _TAGS:
        raise ValueError(f"invalid type for KV override {text!r} (int, float, bool or str)")
    if kind == "int":
        try:
            value: int | float | bool | str = int(raw)
        except ValueError:
            raise ValueError(f"invalid int value for KV override {text!r}") from None
        if not _INT64[0] <= value <= _INT64[1]:
            raise ValueError(f"KV override {key!r}: {raw} does not fit 64 bits")
    elif kind == "float":
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"invalid float value for KV override {text!r}") from None
        if not math.isfinite(value):
            raise ValueError(f"KV override {key!r}: {raw} is not a finite number")
    elif kind == "bool":
        if raw not in ("true", "false"):
            raise ValueError(f"invalid boolean value for KV override {text!r} (true or false)")
        value = raw == "true"
    else:
        if len(raw.encode()) > STR_MAX:
            raise ValueError(f"KV override {key!r}: a string value cannot exceed {STR_MAX} bytes")
        value = raw
    return KvOverride(key, kind, value)


def override_array(overrides: tuple[KvOverride, ...]):
    """llama.cpp's array of overrides, ended by an entry with an empty key."""
    array = (llama_cpp.llama_model_kv_override * (len(overrides) + 1))()
    for entry, override in zip(array, overrides):
        entry.key = override.key.encode()
        entry.tag = _TAGS[override.kind]
        if override.kind == "int":
            entry.value.val_i64 = override.value
        elif override.kind == "float":
            entry.value.val_f64 = override.value
        elif override.kind == "bool":
            entry.value.val_bool = override.value
        else:
            entry.value.val_str = override.value.encode()
    return array
