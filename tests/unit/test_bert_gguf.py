"""The BERT → GGUF converter: metadata, tensor names, shapes and types, F16/F32.

Most tests convert the real all-MiniLM-L6-v2 checkpoint (fetched once, verified);
the edge cases run on a tiny random checkpoint written here.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file

from mlxcel.models.bert_gguf import convert_bert, gguf_name
from mlxcel.models.errors import ConversionError
from tests.fixtures.minilm import ENTRY, minilm_source
from tests.fixtures.tiny_bert import write_tiny_bert

LAYERS = 6
PER_LAYER = (
    "attn_q", "attn_k", "attn_v", "attn_output", "attn_output_norm",
    "ffn_up", "ffn_down", "layer_output_norm",
)
EMBEDDINGS = ("token_embd.weight", "position_embd.weight", "token_types.weight",
              "token_embd_norm.weight", "token_embd_norm.bias")


@pytest.fixture(scope="module")
def source() -> Path:
    return minilm_source()


@pytest.fixture(scope="module")
def f16(source: Path, tmp_path_factory: pytest.TempPathFactory) -> gguf.GGUFReader:
    path = tmp_path_factory.mktemp("f16") / "minilm.gguf"
    convert_bert(source, path, name="all-MiniLM-L6-v2")
    return gguf.GGUFReader(path)


@pytest.fixture(scope="module")
def f32(source: Path, tmp_path_factory: pytest.TempPathFactory) -> gguf.GGUFReader:
    path = tmp_path_factory.mktemp("f32") / "minilm.f32.gguf"
    convert_bert(source, path, outtype="f32")
    return gguf.GGUFReader(path)


def meta(reader: gguf.GGUFReader, key: str) -> object:
    return reader.fields[key].contents()


def tensors(reader: gguf.GGUFReader) -> dict[str, gguf.ReaderTensor]:
    return {t.name: t for t in reader.tensors}


def test_hyperparameters_are_llama_cpp_bert_keys(f16: gguf.GGUFReader) -> None:
    expected = {
        "general.architecture": "bert",
        "general.name": "all-MiniLM-L6-v2",
        "general.file_type": int(gguf.LlamaFileType.MOSTLY_F16),
        "bert.block_count": 6,
        "bert.context_length": 512,
        "bert.embedding_length": 384,
        "bert.feed_forward_length": 1536,
        "bert.attention.head_count": 12,
        "bert.attention.causal": False,
        "bert.pooling_type": int(gguf.PoolingType.MEAN),
    }
    assert {key: meta(f16, key) for key in expected} == expected
    assert meta(f16, "bert.attention.layer_norm_epsilon") == pytest.approx(1e-12)


def test_wordpiece_vocabulary_in_llama_cpp_form(f16: gguf.GGUFReader, source: Path) -> None:
    tokens = meta(f16, "tokenizer.ggml.tokens")
    types = meta(f16, "tokenizer.ggml.token_type")
    vocab = json.loads((source / "tokenizer.json").read_text())["model"]["vocab"]
    assert meta(f16, "tokenizer.ggml.model") == "bert"
    assert meta(f16, "tokenizer.ggml.token_type_count") == 2
    assert len(tokens) == len(types) == 30522
    # word starts carry the phantom space, continuations lose "##", control tokens stay
    assert tokens[vocab["hello"]] == "\u2581hello"
    assert tokens[vocab["##ing"]] == "ing"
    assert [tokens[i] for i in (0, 100, 101, 102, 103)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert [types[i] for i in (0, 100, 101, 102, 103)] == [gguf.TokenType.CONTROL] * 5
    assert types[vocab["hello"]] == gguf.TokenType.NORMAL
    assert meta(f16, "tokenizer.ggml.normalizer.lowercase") is True


def test_special_tokens_and_add_flags(f16: gguf.GGUFReader) -> None:
    ids = {
        "bos": 101, "eos": 102, "seperator": 102, "unknown": 100, "padding": 0, "mask": 103,
    }
    assert {name: meta(f16, f"tokenizer.ggml.{name}_token_id") for name in ids} == ids
    # [CLS] text [SEP]: what llama.cpp's converter derives from the post-processor;
    # rerank prompts then read [CLS] query [SEP] document [SEP]
    assert meta(f16, "tokenizer.ggml.add_bos_token") is True
    assert meta(f16, "tokenizer.ggml.add_eos_token") is True
    assert meta(f16, "tokenizer.ggml.add_sep_token") is False


def test_tensor_names_are_llama_cpp_bert_names(f16: gguf.GGUFReader) -> None:
    expected = set(EMBEDDINGS) | {
        f"blk.{i}.{part}.{kind}" for i in range(LAYERS) for part in PER_LAYER for kind in ("weight", "bias")
    }
    assert set(tensors(f16)) == expected
    assert len(f16.tensors) == len(expected)  # no duplicates, position_ids skipped


def test_names_agree_with_gguf_tensor_name_map(source: Path) -> None:
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, LAYERS)
    for hf_name in load_file(str(source / "model.safetensors")):
        ours = gguf_name(hf_name, LAYERS)
        if hf_name == "embeddings.position_ids":
            assert ours is None
        else:
            assert ours == name_map.get_name(hf_name, try_suffixes=(".weight", ".bias"))


def test_f16_file_keeps_norms_biases_and_positions_f32(f16: gguf.GGUFReader, source: Path) -> None:
    weights = load_file(str(source / "model.safetensors"))
    found = tensors(f16)
    assert list(found["token_embd.weight"].shape) == [384, 30522]  # ggml order
    assert list(found["blk.0.ffn_up.weight"].shape) == [384, 1536]
    assert list(found["blk.0.ffn_down.weight"].shape) == [1536, 384]
    for name, tensor in found.items():
        f32_kept = len(tensor.shape) == 1 or name.endswith("_norm.weight") or name in (
            "position_embd.weight", "token_types.weight"
        )
        want = gguf.GGMLQuantizationType.F32 if f32_kept else gguf.GGMLQuantizationType.F16
        assert tensor.tensor_type == want, name
    source_q = weights["encoder.layer.3.attention.self.query.weight"]
    np.testing.assert_array_equal(found["blk.3.attn_q.weight"].data, source_q.astype(np.float16))
    np.testing.assert_array_equal(found["position_embd.weight"].data, weights["embeddings.position_embeddings.weight"])


def test_f32_on_request_is_exact(f32: gguf.GGUFReader, source: Path) -> None:
    weights = load_file(str(source / "model.safetensors"))
    assert meta(f32, "general.file_type") == int(gguf.LlamaFileType.ALL_F32)
    assert meta(f32, "general.name") == "all-minilm-l6-v2"  # the folder's name by default
    found = tensors(f32)
    assert {t.tensor_type for t in found.values()} == {gguf.GGMLQuantizationType.F32}
    np.testing.assert_array_equal(found["token_embd.weight"].data, weights["embeddings.word_embeddings.weight"])
    np.testing.assert_array_equal(found["blk.5.ffn_down.bias"].data, weights["encoder.layer.5.output.dense.bias"])


def test_the_catalog_file_is_this_converter_s_f16_output(source: Path, tmp_path: Path) -> None:
    path = tmp_path / "again.gguf"
    convert_bert(source, path, name=ENTRY.conversion.model_name)  # type: ignore[union-attr]
    assert path.stat().st_size == ENTRY.size
    import hashlib

    assert hashlib.sha256(path.read_bytes()).hexdigest() == ENTRY.sha256


# --- edge cases on a tiny random checkpoint ------------------------------------------

def test_vocab_txt_checkpoint_with_bert_prefix_and_pooler(tmp_path: Path) -> None:
    result = convert_bert(write_tiny_bert(tmp_path / "tiny"), tmp_path / "tiny.gguf")
    reader = gguf.GGUFReader(tmp_path / "tiny.gguf")
    assert not any(name.startswith("cls") for name in result.tensor_names)  # pooler skipped
    assert len(result.tensor_names) == 5 + 2 * 16
    assert result.pooling == "mean"  # no sentence-transformers config: mean
    assert meta(reader, "tokenizer.ggml.tokens")[5:8] == ["\u2581hello", "\u2581world", "s"]
    assert meta(reader, "tokenizer.ggml.token_type")[:5] == [gguf.TokenType.CONTROL] * 5
    assert meta(reader, "bert.attention.layer_norm_epsilon") == pytest.approx(1e-5)


def test_pooling_comes_from_the_sentence_transformers_config(tmp_path: Path) -> None:
    folder = write_tiny_bert(tmp_path / "cls")
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    assert convert_bert(folder, tmp_path / "a.gguf").pooling == "cls"
    assert convert_bert(folder, tmp_path / "b.gguf", pooling="last").pooling == "last"
    reader = gguf.GGUFReader(tmp_path / "b.gguf")
    assert meta(reader, "bert.pooling_type") == int(gguf.PoolingType.LAST)
    with pytest.raises(ConversionError, match="pooling 'max'"):
        convert_bert(folder, tmp_path / "c.gguf", pooling="max")


def test_classification_head_becomes_cls_output_with_rank_pooling(tmp_path: Path) -> None:
    folder = write_tiny_bert(tmp_path / "ce", labels=["LABEL_0"])
    result = convert_bert(folder, tmp_path / "ce.gguf")
    reader = gguf.GGUFReader(tmp_path / "ce.gguf")
    # the pooler (dense + tanh) becomes llama.cpp's cls, the classifier its cls.output
    assert {"cls.weight", "cls.bias", "cls.output.weight", "cls.output.bias"} <= set(result.tensor_names)
    assert list(tensors(reader)["cls.output.weight"].shape) == [8, 1]
    assert result.pooling == "rank"
    assert meta(reader, "bert.pooling_type") == int(gguf.PoolingType.RANK)
    assert meta(reader, "bert.classifier.output_labels") == ["LABEL_0"]


def test_unknown_tensors_and_models_are_refused(tmp_path: Path) -> None:
    odd = write_tiny_bert(tmp_path / "odd", extra={"encoder.layer.0.adapter.weight": np.ones(2, np.float32)})
    with pytest.raises(ConversionError, match="adapter"):
        convert_bert(odd, tmp_path / "odd.gguf")
    roberta = write_tiny_bert(tmp_path / "roberta", model_type="roberta")
    with pytest.raises(ConversionError, match="not a BERT checkpoint"):
        convert_bert(roberta, tmp_path / "r.gguf")
    with pytest.raises(ConversionError, match="outtype"):
        convert_bert(roberta, tmp_path / "r.gguf", outtype="q4")


def test_the_command_line_converts_any_checkpoint_f32_on_request(source: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    out = tmp_path / "minilm.f32.gguf"
    run = subprocess.run([sys.executable, "-m", "mlxcel", "convert-bert", str(source), str(out), "--outtype", "f32"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    weights = tensors(gguf.GGUFReader(out))["blk.0.attn_q.weight"]
    assert weights.tensor_type == gguf.GGMLQuantizationType.F32
    bad = subprocess.run([sys.executable, "-m", "mlxcel", "convert-bert", str(tmp_path / "nowhere"), str(out)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
