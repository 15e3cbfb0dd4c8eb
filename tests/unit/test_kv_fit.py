"""A KV cache larger than the machine's memory is refused before llama.cpp makes it
(it would clear every page of it, and grow until the kernel killed the process)."""

from __future__ import annotations

from mlxcel.engine.kv_fit import cache_refusal
from mlxcel.models.gguf_header import Geometry, kv_bytes

GIB = 2**30
# SmolLM2-135M's shape: 30 layers, 3 KV heads of 64 dimensions (23,040 bytes a token at f16)
SMOL = Geometry(arch="llama", n_layer=30, n_embd=576, n_head=9, n_head_kv=(3,) * 30, head_dim_k=64,
                head_dim_v=64, n_ctx_train=8192, sliding_window=None)
# a model whose every other layer attends to a 512-token window
SLIDING = Geometry(arch="gemma3", n_layer=4, n_embd=256, n_head=4, n_head_kv=(1,) * 4, head_dim_k=64,
                   head_dim_v=64, n_ctx_train=32768, sliding_window=512, sliding=(True, False, True, False))


def test_a_cache_past_the_machine_is_refused_naming_what_it_needs():
    assert cache_refusal(SMOL, 8192, "f16", "f16", False, 24 * GIB) is None
    why = cache_refusal(SMOL, 2_000_000_000, "f16", "f16", False, 24 * GIB)
    assert why is not None and "2000000000 tokens (f16/f16)" in why and "42,915.3 GiB" in why
    assert "24.0 GiB" in why and "-c" in why


def test_the_bound_is_the_cache_s_own_size_at_its_types():
    n = 1_000_000
    f16 = kv_bytes(SMOL, n, "f16", "f16")
    assert cache_refusal(SMOL, n, "f16", "f16", False, f16) is None
    assert cache_refusal(SMOL, n, "f16", "f16", False, f16 - 1) is not None
    assert cache_refusal(SMOL, n, "q8_0", "q8_0", False, f16 - 1) is None  # q8_0 takes about half


def test_sliding_layers_hold_their_window_unless_swa_full():
    n = 4_000_000
    windowed = kv_bytes(SLIDING, n, "f16", "f16")
    assert cache_refusal(SLIDING, n, "f16", "f16", False, windowed) is None
    assert cache_refusal(SLIDING, n, "f16", "f16", True, windowed) is not None
