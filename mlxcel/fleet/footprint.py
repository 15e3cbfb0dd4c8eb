"""How much memory a model takes once loaded, known before loading it: its weights
(the GGUF's bytes, mapped from the file), its KV cache (bytes per token from the
model's geometry, times the context), and llama.cpp's compute buffers (a transient
that grows with the batch and the vocabulary). After the load the estimate is
replaced by what llama.cpp reports."""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlxcel.config import ServerConfig
from mlxcel.fleet.entries import ModelEntry
from mlxcel.fleet.model_files import gguf_path, metadata
from mlxcel.models.catalog import CATALOG
from mlxcel.models.gguf_header import GGUFHeaderError, Skipped, kv_bytes, kv_bytes_per_token, model_geometry

# compute buffers: llama.cpp sizes them for one ubatch; the logits rows dominate
# with a large vocabulary (n_vocab x n_ubatch floats), the activations otherwise
COMPUTE_FLOOR_BYTES = 32 << 20


@dataclass(frozen=True)
class Footprint:
    family: str | None
    weights_bytes: int
    kv_bytes_per_token: int
    n_ctx: int  # the context the model loads with
    compute_bytes: int
    n_ctx_train: int = 0
    kv_total: int | None = None  # the KV of the whole context (sliding-window layers hold their window)

    @property
    def kv_bytes(self) -> int:
        return self.kv_total if self.kv_total is not None else self.kv_bytes_per_token * self.n_ctx

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes

    def measured(self, host) -> Footprint:
        """The loaded model's own figures (llama_model_size, the context it got)."""
        runtime = host.runtime
        if runtime is None:
            return self
        return replace(self, weights_bytes=runtime.model_size(), n_ctx=runtime.n_ctx,
                       family=host.model_family or self.family)


def compute_bytes(n_vocab: int, n_ubatch: int) -> int:
    """llama.cpp's compute buffer, roughly: one ubatch of logits rows, or the floor."""
    return max(COMPUTE_FLOOR_BYTES, 4 * n_vocab * min(n_ubatch, 512))


def estimate_footprint(entry: ModelEntry, base: ServerConfig) -> Footprint:
    ctx = entry.load.ctx_size if entry.load.ctx_size is not None else base.ctx_size
    type_k = entry.load.cache_type_k or base.cache_type_k
    type_v = entry.load.cache_type_v or base.cache_type_v
    return _estimate(entry.path, ctx, type_k, type_v, base.ubatch_size)


def _estimate(source: str, ctx: int, type_k: str, type_v: str, n_ubatch: int) -> Footprint:
    meta = metadata(source)
    if meta is None:  # not stored yet: the catalog's size, no geometry
        catalog = CATALOG.get(source)
        size = catalog.size if catalog is not None else 0
        return Footprint(None, size, 0, ctx, COMPUTE_FLOOR_BYTES)
    try:
        geometry = model_geometry(meta)
    except GGUFHeaderError:  # a GGUF that is no model (a projector, an adapter): its load fails, for it alone
        return Footprint(None, gguf_path(source).stat().st_size, 0, ctx, COMPUTE_FLOOR_BYTES)
    n_ctx = ctx if ctx > 0 else geometry.n_ctx_train
    tokens = meta.get("tokenizer.ggml.tokens", ())
    n_vocab = tokens.length if isinstance(tokens, Skipped) else len(tokens) if isinstance(tokens, list) else 0
    compute = compute_bytes(n_vocab, n_ubatch)
    return Footprint(geometry.arch, gguf_path(source).stat().st_size, kv_bytes_per_token(geometry, type_k, type_v), n_ctx,
                     compute, geometry.n_ctx_train, kv_bytes(geometry, n_ctx, type_k, type_v))
