"""The GGUF metadata reader and the KV geometry, on the real catalog models (and
llama.cpp's own KV figure for one of them)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from mlxcel.models.catalog import CATALOG
from mlxcel.models.gguf_header import (
    GGUFHeaderError,
    Skipped,
    kv_bytes,
    kv_bytes_per_token,
    model_geometry,
    read_gguf_metadata,
)
from mlxcel.models.pull import pull
from mlxcel.models.store import model_path


def _model(name: str) -> Path:
    """The catalog model's file, pulled first when missing (`make unit` runs before any e2e test pulls it)."""
    path = model_path(CATALOG[name])
    return path if path.is_file() else pull(name, progress=False, log=lambda _msg: None)


# name: (arch, layers, embd, heads, kv heads, head dim, trained context, f16 KV bytes per token)
EXPECTED = {
    "smollm2-135m-instruct": ("llama", 30, 576, 9, 3, 64, 8192, 30 * 2 * 3 * 64 * 2),
    "qwen2.5-coder-0.5b-instruct": ("qwen2", 24, 896, 14, 2, 64, 32768, 24 * 2 * 2 * 64 * 2),
    "gemma-3-270m": ("gemma3", 18, 640, 4, 1, 256, 32768, 18 * 2 * 1 * 256 * 2),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_geometry_of_the_catalog_models(name: str) -> None:
    arch, layers, embd, heads, kv_heads, head_dim, n_ctx, per_token = EXPECTED[name]
    meta = read_gguf_metadata(_model(name))
    geometry = model_geometry(meta)
    assert (geometry.arch, geometry.n_layer, geometry.n_embd, geometry.n_head) == (arch, layers, embd, heads)
    assert geometry.n_head_kv == (kv_heads,) * layers
    assert (geometry.head_dim_k, geometry.head_dim_v, geometry.n_ctx_train) == (head_dim, head_dim, n_ctx)
    assert kv_bytes_per_token(geometry) == per_token
    assert kv_bytes_per_token(geometry, "f32", "f32") == 2 * per_token


def test_quantized_kv_types_count_their_blocks() -> None:
    geometry = model_geometry(read_gguf_metadata(_model("smollm2-135m-instruct")))
    row = 3 * 64  # values per layer per token, K or V
    assert kv_bytes_per_token(geometry, "q8_0", "q8_0") == 30 * 2 * (row // 32) * 34
    assert kv_bytes_per_token(geometry, "q4_0", "q4_0") == 30 * 2 * (row // 32) * 18
    assert kv_bytes_per_token(geometry, "f16", "q4_0") == 30 * (row * 2 + (row // 32) * 18)
    with pytest.raises(ValueError, match="unknown KV cache type"):
        kv_bytes_per_token(geometry, "q3_k")


def test_gemma3_sliding_layers_hold_only_their_window() -> None:
    geometry = model_geometry(read_gguf_metadata(_model("gemma-3-270m")))
    assert geometry.sliding_window == 512
    # llama.cpp's gemma3 pattern: every 6th layer attends fully
    assert geometry.swa_layers == 15
    assert [il for il, sliding in enumerate(geometry.sliding) if not sliding] == [5, 11, 17]
    per_layer = 2 * 256 * 2
    assert kv_bytes(geometry, 4096) == 3 * per_layer * 4096 + 15 * per_layer * 512
    assert kv_bytes(geometry, 100) == kv_bytes_per_token(geometry) * 100


def test_the_reader_keeps_small_values_and_skips_vocabularies() -> None:
    meta = read_gguf_metadata(_model("qwen2.5-coder-0.5b-instruct"))
    assert meta["GGUF.version"] == 3 and meta["GGUF.tensor_count"] > 0
    assert meta["general.architecture"] == "qwen2"
    assert "<|im_start|>" in meta["tokenizer.chat_template"]
    tokens = meta["tokenizer.ggml.tokens"]
    assert isinstance(tokens, Skipped) and tokens.length > 150_000


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "x.gguf"
    path.write_bytes(data)
    return path


def _string(text: str) -> bytes:
    return struct.pack("<Q", len(text)) + text.encode()


def test_a_hand_written_header(tmp_path: Path) -> None:
    kvs = [
        _string("general.architecture") + struct.pack("<I", 8) + _string("llama"),
        _string("llama.block_count") + struct.pack("<I", 4) + struct.pack("<I", 2),
        _string("llama.embedding_length") + struct.pack("<I", 4) + struct.pack("<I", 64),
        _string("llama.attention.head_count") + struct.pack("<I", 4) + struct.pack("<I", 4),
        _string("llama.attention.head_count_kv") + struct.pack("<I", 9) + struct.pack("<IQ", 5, 2)
        + struct.pack("<ii", 2, 1),
        _string("llama.context_length") + struct.pack("<I", 10) + struct.pack("<Q", 512),
        _string("flag") + struct.pack("<I", 7) + b"\x01",
    ]
    header = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)
    meta = read_gguf_metadata(_write(tmp_path, header))
    assert meta["flag"] is True
    geometry = model_geometry(meta)
    assert geometry.n_head_kv == (2, 1)  # per-layer counts
    assert geometry.head_dim_k == 16  # n_embd / n_head when the GGUF has no key_length
    assert kv_bytes_per_token(geometry) == (2 + 1) * 16 * 2 * 2


@pytest.mark.parametrize("data, reason", [
    (b"GGML" + b"\0" * 40, "bad magic"),
    (b"GGUF" + struct.pack("<IQQ", 1, 0, 0) + b"\0" * 8, "unsupported GGUF version"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + _string("k"), "truncated"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("k") + struct.pack("<I", 77) + b"\0" * 8, "value type 77"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**40) + b"\0" * 8, "truncated"),
    (b"GGUF", "too short"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _string("k") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 5000
     + struct.pack("<IQ", 4, 0), "an array of arrays"),
])
def test_broken_files_raise_a_header_error(tmp_path: Path, data: bytes, reason: str) -> None:
    with pytest.raises(GGUFHeaderError, match=reason):
        read_gguf_metadata(_write(tmp_path, data))


def test_geometry_needs_the_architecture_keys() -> None:
    with pytest.raises(GGUFHeaderError, match="general.architecture"):
        model_geometry({})
    with pytest.raises(GGUFHeaderError, match="llama.block_count"):
        model_geometry({"general.architecture": "llama"})


@pytest.mark.parametrize("changes, reason", [
    ({"llama.block_count": 2**40}, "implausible `llama.block_count`"),
    ({"llama.block_count": 0}, "implausible `llama.block_count`"),
    ({"llama.attention.head_count": "four"}, "malformed `llama.attention.head_count`"),
    ({"llama.attention.head_count": [4, "x"]}, "malformed `llama.attention.head_count`"),
])
def test_hostile_geometry_values_are_a_header_error(changes: dict, reason: str) -> None:
    meta = {"general.architecture": "llama", "llama.block_count": 2, "llama.embedding_length": 64,
            "llama.attention.head_count": 4} | changes
    with pytest.raises(GGUFHeaderError, match=reason):
        model_geometry(meta)


def test_kv_bytes_per_token_matches_llama_cpp() -> None:
    """llama.cpp's own size of one sequence's KV: the growth of its saved state per
    decoded token. The state's fixed header cancels out; each cell adds its own
    header of 12 bytes (position, sequence count, the sequence id: state_write_meta)."""
    import llama_cpp

    from mlxcel.engine.llama_runtime import LlamaRuntime, RuntimeConfig

    path = _model("smollm2-135m-instruct")
    runtime = LlamaRuntime(RuntimeConfig(model_path=path, n_ctx=256, n_parallel=1))
    try:
        def decode(tokens: list[int]) -> None:
            array = (llama_cpp.llama_token * len(tokens))(*tokens)
            assert runtime.decode(llama_cpp.llama_batch_get_one(array, len(tokens))) == 0

        decode(list(range(100, 108)))
        before = len(runtime.seq_state(0))
        decode(list(range(200, 216)))
        after = len(runtime.seq_state(0))
    finally:
        runtime.close()
    geometry = model_geometry(read_gguf_metadata(path))
    assert (after - before) / 16 - 12 == kv_bytes_per_token(geometry)


def test_a_footprint_takes_whatever_a_header_holds(tmp_path: Path) -> None:
    """Sizing a models-folder file never raises: a vocabulary that is no list counts as
    none, and a header without a model's geometry is sized by its file alone."""
    from mlxcel.fleet.footprint import COMPUTE_FLOOR_BYTES, _estimate

    def u32(key: str, value: int) -> bytes:
        return _string(key) + struct.pack("<I", 4) + struct.pack("<I", value)

    arch = _string("general.architecture") + struct.pack("<I", 8) + _string("llama")
    kvs = [arch, u32("llama.block_count", 2), u32("llama.embedding_length", 64),
           u32("llama.attention.head_count", 4), u32("tokenizer.ggml.tokens", 5)]
    path = _write(tmp_path, b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs))
    assert _estimate(str(path), 512, "f16", "f16", 512).compute_bytes == COMPUTE_FLOOR_BYTES
    path = _write(tmp_path, b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + arch)
    footprint = _estimate(str(path), 512, "f16", "f16", 512)
    assert footprint.weights_bytes == path.stat().st_size and footprint.kv_bytes == 0
