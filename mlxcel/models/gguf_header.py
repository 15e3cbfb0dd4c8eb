"""A GGUF file's metadata key/values, read without touching its tensors, and the
geometry that sizes its KV cache.

The reader parses the header and the key/value section only (the tensor infos and
the tensor data after them are never read). Strings longer than MAX_STRING bytes and
arrays longer than MAX_ARRAY items are skipped over and stand as a `Skipped` marker,
so a vocabulary of 150k tokens costs a walk, not a list."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAGIC = b"GGUF"
MAX_STRING = 1 << 20  # a chat template is tens of KB
MAX_ARRAY = 4096  # per-layer arrays (head counts, window flags) fit; vocabularies do not
MAX_KV = 1 << 16

# GGUF value types: struct format of the fixed-size ones
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

# KV cache element sizes: (bytes per block, values per block), as llama.cpp's -ctk / -ctv name them
CACHE_TYPE_SIZES = {
    "f32": (4, 1), "f16": (2, 1), "bf16": (2, 1), "q8_0": (34, 32), "q4_0": (18, 32), "q4_1": (20, 32),
    "iq4_nl": (18, 32), "q5_0": (22, 32), "q5_1": (24, 32),
}

# sliding-window layer patterns llama.cpp applies when the GGUF does not carry one:
# with pattern n, every n-th layer attends fully and the others use the window
_SWA_PATTERN_DEFAULTS = {"gemma3": 6, "gemma2": 2, "cohere2": 4}


class GGUFHeaderError(ValueError):
    """Not a GGUF file, or its header is truncated or malformed."""


@dataclass(frozen=True)
class Skipped:
    """A value too large to keep: its GGUF type (a string, or an array of item_type) and length."""

    item_type: int
    length: int


class _Reader:
    def __init__(self, buffer: mmap.mmap, path: Path) -> None:
        self.buffer = buffer
        self.offset = 0
        self.path = path

    def take(self, size: int) -> memoryview:
        end = self.offset + size
        if size < 0 or end > len(self.buffer):
            raise GGUFHeaderError(f"{self.path}: truncated GGUF header at byte {self.offset}")
        view = memoryview(self.buffer)[self.offset:end]
        self.offset = end
        return view

    def scalar(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))[0]

    def string(self) -> str | Skipped:
        length = self.scalar("<Q")
        if length > MAX_STRING:
            self.take(length)
            return Skipped(_STRING, length)
        return bytes(self.take(length)).decode("utf-8", errors="replace")

    def value(self, kind: int) -> Any:
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            return self.array()
        raise GGUFHeaderError(f"{self.path}: unknown GGUF value type {kind} at byte {self.offset}")

    def array(self) -> list | Skipped:
        item_type = self.scalar("<I")
        if item_type == _ARRAY:  # llama.cpp's reader refuses them too; followed, they nest without end
            raise GGUFHeaderError(f"{self.path}: an array of arrays at byte {self.offset}")
        count = self.scalar("<Q")
        if count <= MAX_ARRAY:
            return [self.value(item_type) for _ in range(count)]
        if item_type in _SCALARS:
            self.take(count * struct.calcsize(_SCALARS[item_type]))
        else:
            for _ in range(count):
                self.value(item_type)
        return Skipped(item_type, count)


def read_gguf_metadata(path: str | Path) -> dict[str, Any]:
    """The key/values of the GGUF at `path` (plus `GGUF.version`, `GGUF.tensor_count`).
    GGUFHeaderError when it is not a readable GGUF; OSError when it cannot be opened."""
    path = Path(path)
    with open(path, "rb") as f:
        if f.seek(0, 2) < 24:
            raise GGUFHeaderError(f"{path}: too short to be a GGUF file")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
            reader = _Reader(buffer, path)
            if bytes(reader.take(4)) != MAGIC:
                raise GGUFHeaderError(f"{path}: not a GGUF file (bad magic)")
            version = reader.scalar("<I")
            if version not in (2, 3):
                raise GGUFHeaderError(f"{path}: unsupported GGUF version {version}")
            n_tensors, n_kv = reader.scalar("<Q"), reader.scalar("<Q")
            if n_kv > MAX_KV:
                raise GGUFHeaderError(f"{path}: implausible key/value count {n_kv}")
            meta: dict[str, Any] = {"GGUF.version": version, "GGUF.tensor_count": n_tensors}
            for _ in range(n_kv):
                key = reader.string()
                if isinstance(key, Skipped):
                    raise GGUFHeaderError(f"{path}: a key of {key.length} bytes")
                meta[key] = reader.value(reader.scalar("<I"))
            return meta


@dataclass(frozen=True)
class Geometry:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: tuple[int, ...]  # per layer (a uniform count repeated)
    head_dim_k: int
    head_dim_v: int
    n_ctx_train: int
    sliding_window: int | None  # tokens a sliding-window layer attends to; None: no such layers
    sliding: tuple[bool, ...] = ()  # per layer: uses the sliding window (empty: none does)

    @property
    def swa_layers(self) -> int:
        return sum(self.sliding)


def _int(meta: dict, key: str, default: int | None = None) -> int:
    value = meta.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise GGUFHeaderError(f"GGUF metadata lacks an integer `{key}`")
    return value


def model_geometry(meta: dict[str, Any]) -> Geometry:
    """What sizes the KV cache, from `read_gguf_metadata`'s dict."""
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise GGUFHeaderError("GGUF metadata lacks `general.architecture`")
    n_layer = _int(meta, f"{arch}.block_count")
    if not 0 < n_layer <= MAX_ARRAY:  # per-layer arrays are read up to MAX_ARRAY items
        raise GGUFHeaderError(f"GGUF metadata has an implausible `{arch}.block_count` ({n_layer})")
    n_embd = _int(meta, f"{arch}.embedding_length")
    n_head = meta.get(f"{arch}.attention.head_count", 0)
    heads = n_head if isinstance(n_head, list) else [n_head] * n_layer
    if not all(isinstance(h, int) and not isinstance(h, bool) for h in heads):
        raise GGUFHeaderError(f"GGUF metadata has a malformed `{arch}.attention.head_count`")
    n_head_kv = meta.get(f"{arch}.attention.head_count_kv", n_head)
    kv_heads = n_head_kv if isinstance(n_head_kv, list) else [n_head_kv] * n_layer
    if len(kv_heads) != n_layer or not all(isinstance(h, int) for h in kv_heads):
        raise GGUFHeaderError(f"GGUF metadata has a malformed `{arch}.attention.head_count_kv`")
    first_head = max(heads) if heads else 0
    default_dim = n_embd // first_head if first_head else 0
    head_dim_k = _int(meta, f"{arch}.attention.key_length", default_dim)
    head_dim_v = _int(meta, f"{arch}.attention.value_length", head_dim_k)
    window = meta.get(f"{arch}.attention.sliding_window")
    window = window if isinstance(window, int) and window > 0 else None
    return Geometry(
        arch=arch, n_layer=n_layer, n_embd=n_embd, n_head=first_head, n_head_kv=tuple(kv_heads),
        head_dim_k=head_dim_k, head_dim_v=head_dim_v, n_ctx_train=_int(meta, f"{arch}.context_length", 0),
        sliding_window=window, sliding=_sliding_layers(meta, arch, n_layer) if window else (),
    )


def _sliding_layers(meta: dict, arch: str, n_layer: int) -> tuple[bool, ...]:
    pattern = meta.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list) and len(pattern) == n_layer:  # per-layer flags: true = sliding
        return tuple(bool(flag) for flag in pattern)
    n = pattern if isinstance(pattern, int) and pattern > 0 else _SWA_PATTERN_DEFAULTS.get(arch, 0)
    return tuple(bool(n) and il % n < n - 1 for il in range(n_layer))


def _row_bytes(type_name: str, values: int) -> int:
    if type_name not in CACHE_TYPE_SIZES:
        raise ValueError(f"unknown KV cache type `{type_name}`; valid: {', '.join(CACHE_TYPE_SIZES)}")
    block_bytes, block_values = CACHE_TYPE_SIZES[type_name]
    return -(-values // block_values) * block_bytes


def _layer_bytes(geometry: Geometry, layer: int, type_k: str, type_v: str) -> int:
    heads = geometry.n_head_kv[layer]
    return _row_bytes(type_k, heads * geometry.head_dim_k) + _row_bytes(type_v, heads * geometry.head_dim_v)


def kv_bytes_per_token(geometry: Geometry, type_k: str = "f16", type_v: str = "f16") -> int:
    """Bytes of K and V one token takes across every layer (a full-size cache: sliding
    layers counted as the others, as llama.cpp's --swa-full keeps them)."""
    return sum(_layer_bytes(geometry, il, type_k, type_v) for il in range(geometry.n_layer))


def kv_bytes(geometry: Geometry, n_tokens: int, type_k: str = "f16", type_v: str = "f16") -> int:
    """Bytes of K and V for a context of `n_tokens`, the sliding-window layers holding
    at most their window (llama.cpp's default, without --swa-full; its small padding aside)."""
    window = geometry.sliding_window or n_tokens
    total = 0
    for il in range(geometry.n_layer):
        sliding = bool(geometry.sliding) and geometry.sliding[il]
        total += _layer_bytes(geometry, il, type_k, type_v) * (min(n_tokens, window) if sliding else n_tokens)
    return total

