"""Convert a BERT-family checkpoint (safetensors + config.json + tokenizer) to GGUF.

Torch-free: safetensors' numpy loader, numpy and the ``gguf`` package. The result has
llama.cpp's BERT layout (architecture ``bert``, its tensor names, WordPiece vocabulary,
pooling type), so llama.cpp loads it as it loads the output of its own converter.
Weight matrices are F16 by default (``outtype="f32"`` keeps F32); norms, biases,
position and token-type embeddings stay F32, as llama.cpp's converter keeps them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from safetensors import safe_open

from mlxcel.models.bert_vocab import read_vocab, write_vocab
from mlxcel.models.errors import ConversionError

ARCH = "bert"
OUTTYPES = {"f16": gguf.LlamaFileType.MOSTLY_F16, "f32": gguf.LlamaFileType.ALL_F32}
POOLING = {
    "none": gguf.PoolingType.NONE,
    "mean": gguf.PoolingType.MEAN,
    "cls": gguf.PoolingType.CLS,
    "last": gguf.PoolingType.LAST,
    "rank": gguf.PoolingType.RANK,
}
SUPPORTED_ARCHITECTURES = ("BertModel", "BertForMaskedLM", "BertForSequenceClassification")

# HF name (without "bert." prefix and ".weight"/".bias") → llama.cpp name
_EMBEDDINGS = {
    "embeddings.word_embeddings": "token_embd",
    "embeddings.position_embeddings": "position_embd",
    "embeddings.token_type_embeddings": "token_types",
    "embeddings.LayerNorm": "token_embd_norm",
}
_LAYER = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
_CLASSIFIER = {"classifier": "cls.output", "classifier.dense": "cls", "classifier.out_proj": "cls.output"}
# tensors llama.cpp has no use for: the pooler and the pre-training heads
_SKIPPED = re.compile(r"^(embeddings\.position_ids|pooler\..*|cls\.(predictions|seq_relationship)\..*)$")
_LAYER_NAME = re.compile(r"^encoder\.layer\.(\d+)\.(.+)$")
# always F32 even in an F16 file (llama.cpp's converter keeps them so)
_F32_ALWAYS = ("position_embd.weight", "token_types.weight")


@dataclass(frozen=True)
class ConvertedModel:
    path: Path
    tensor_names: list[str]
    pooling: str
    n_embd: int
    n_vocab: int


def gguf_name(hf_name: str, n_layers: int) -> str | None:
    """llama.cpp's name of checkpoint tensor ``hf_name``; None if llama.cpp skips it."""
    name = hf_name.removeprefix("bert.")
    if name.endswith(".gamma"):
        name = name[: -len(".gamma")] + ".weight"
    elif name.endswith(".beta"):
        name = name[: -len(".beta")] + ".bias"
    if _SKIPPED.match(name):
        return None
    stem, dot, suffix = name.rpartition(".")
    if suffix not in ("weight", "bias") or not dot:
        raise ConversionError(f"unexpected tensor {hf_name!r}")
    if stem in _EMBEDDINGS:
        return f"{_EMBEDDINGS[stem]}.{suffix}"
    if stem in _CLASSIFIER:
        return f"{_CLASSIFIER[stem]}.{suffix}"
    layer = _LAYER_NAME.match(stem)
    if layer and layer.group(2) in _LAYER and int(layer.group(1)) < n_layers:
        return f"blk.{layer.group(1)}.{_LAYER[layer.group(2)]}.{suffix}"
    raise ConversionError(f"tensor {hf_name!r} has no place in llama.cpp's BERT layout")


def tensor_dtype(name: str, ndim: int, outtype: str) -> type[np.floating]:
    """float16 for weight matrices of an F16 file; float32 for everything else."""
    if outtype == "f32" or ndim <= 1 or name.endswith("_norm.weight") or name in _F32_ALWAYS:
        return np.float32
    return np.float16


def read_config(model_dir: Path) -> dict[str, object]:
    path = model_dir / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConversionError(f"{path}: {exc}") from exc
    architectures = config.get("architectures") or ["BertModel"]
    if config.get("model_type", "bert") != "bert" or architectures[0] not in SUPPORTED_ARCHITECTURES:
        raise ConversionError(
            f"{path}: {config.get('model_type')!r}/{architectures[0]!r} is not a BERT checkpoint "
            f"({', '.join(SUPPORTED_ARCHITECTURES)})"
        )
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ConversionError(f"{path}: only absolute position embeddings are supported")
    return config


def classifier_labels(config: dict[str, object]) -> list[str] | None:
    """The classification head's labels; None for the two dummy labels AutoConfig adds."""
    labels = config.get("id2label")
    if not isinstance(labels, dict) or not labels:
        return None
    if len(labels) == 2 and labels.get("0") == "LABEL_0":
        return None
    return [str(labels[key]) for key in sorted(labels, key=int)]


def sentence_pooling(model_dir: Path) -> str | None:
    """The pooling that a sentence-transformers checkpoint declares (mean/cls/last)."""
    pooling_dir = "1_Pooling"
    modules = model_dir / "modules.json"
    if modules.is_file():
        for module in json.loads(modules.read_text(encoding="utf-8")):
            if str(module.get("type", "")).endswith("Pooling"):
                pooling_dir = module.get("path") or pooling_dir
                break
    path = model_dir / pooling_dir / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text(encoding="utf-8"))
    for flag, mode in (
        ("pooling_mode_mean_tokens", "mean"),
        ("pooling_mode_cls_token", "cls"),
        ("pooling_mode_lasttoken", "last"),
    ):
        if config.get(flag):
            return mode
    mode = {"mean": "mean", "cls": "cls", "lasttoken": "last"}.get(str(config.get("pooling_mode")))
    if mode is None:
        raise ConversionError(f"{path}: only mean, cls and last-token pooling are supported")
    return mode


def _pooling(model_dir: Path, config: dict[str, object], requested: str | None) -> str:
    if requested is not None:
        if requested not in POOLING:
            raise ConversionError(f"pooling {requested!r} (want one of {', '.join(POOLING)})")
        return requested
    declared = sentence_pooling(model_dir)
    if declared is not None:
        return declared
    return "rank" if classifier_labels(config) else "mean"


def _write_hparams(
    writer: gguf.GGUFWriter, config: dict[str, object], name: str, outtype: str, pooling: str
) -> None:
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name)
    writer.add_block_count(int(config["num_hidden_layers"]))  # type: ignore[call-overload]
    writer.add_context_length(int(config.get("max_position_embeddings", 512)))  # type: ignore[call-overload]
    writer.add_embedding_length(int(config["hidden_size"]))  # type: ignore[call-overload]
    writer.add_feed_forward_length(int(config["intermediate_size"]))  # type: ignore[call-overload]
    writer.add_head_count(int(config["num_attention_heads"]))  # type: ignore[call-overload]
    writer.add_layer_norm_eps(float(config.get("layer_norm_eps", 1e-12)))  # type: ignore[arg-type]
    writer.add_causal_attention(False)
    writer.add_pooling_type(POOLING[pooling])
    labels = classifier_labels(config)
    if labels:
        writer.add_classifier_output_labels(labels)
    writer.add_file_type(OUTTYPES[outtype])


def convert_bert(
    model_dir: Path,
    out_path: Path,
    *,
    outtype: str = "f16",
    pooling: str | None = None,
    name: str | None = None,
) -> ConvertedModel:
    """Write the GGUF of the checkpoint in ``model_dir`` to ``out_path``.

    ``model_dir`` holds config.json, model.safetensors and tokenizer.json (or
    vocab.txt); a sentence-transformers pooling config, when present, sets the
    pooling type (else mean, or rank for a classification head); ``pooling``
    overrides it.
    """
    if outtype not in OUTTYPES:
        raise ConversionError(f"outtype {outtype!r} (want f16 or f32)")
    model_dir = Path(model_dir)
    config = read_config(model_dir)
    n_layers = int(config["num_hidden_layers"])  # type: ignore[call-overload]
    n_vocab = int(config["vocab_size"])  # type: ignore[call-overload]
    chosen = _pooling(model_dir, config, pooling)
    vocab = read_vocab(model_dir, n_vocab)
    writer = gguf.GGUFWriter(out_path, ARCH)
    try:
        _write_hparams(writer, config, name or model_dir.name, outtype, chosen)
        write_vocab(writer, model_dir, vocab, int(config.get("type_vocab_size", 2)))  # type: ignore[call-overload]
        names = _add_tensors(writer, model_dir / "model.safetensors", n_layers, n_vocab, outtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    return ConvertedModel(Path(out_path), names, chosen, int(config["hidden_size"]), n_vocab)  # type: ignore[call-overload]


def _add_tensors(writer: gguf.GGUFWriter, weights: Path, n_layers: int, n_vocab: int, outtype: str) -> list[str]:
    if not weights.is_file():
        raise ConversionError(f"{weights}: missing")
    names: list[str] = []
    with safe_open(str(weights), framework="numpy") as source:
        for hf_name in sorted(source.keys(), key=_natural_key):
            name = gguf_name(hf_name, n_layers)
            if name is None:
                continue
            data = source.get_tensor(hf_name)
            if name == "token_embd.weight" and data.shape[0] != n_vocab:
                raise ConversionError(f"{hf_name}: {data.shape[0]} rows, config says vocab_size {n_vocab}")
            writer.add_tensor(name, np.ascontiguousarray(data.astype(tensor_dtype(name, data.ndim, outtype))))
            names.append(name)
    missing = {"token_embd.weight", "position_embd.weight", "token_embd_norm.weight"} - set(names)
    missing |= {f"blk.{i}.attn_q.weight" for i in range(n_layers)} - set(names)
    if missing:
        raise ConversionError(f"{weights}: tensors missing: {', '.join(sorted(missing))}")
    return names


def _natural_key(name: str) -> list[object]:
    """Sort layer 10 after layer 9: digits compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]
