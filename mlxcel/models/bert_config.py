"""The hyperparameters of a BERT checkpoint folder, read from its config.json and, for
the pooling type, from its sentence-transformers pooling config."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import gguf

from mlxcel.models.errors import ConversionError

POOLING = {
    "none": gguf.PoolingType.NONE,
    "mean": gguf.PoolingType.MEAN,
    "cls": gguf.PoolingType.CLS,
    "last": gguf.PoolingType.LAST,
    "rank": gguf.PoolingType.RANK,
}
SUPPORTED_ARCHITECTURES = ("BertModel", "BertForMaskedLM", "BertForSequenceClassification")


@dataclass(frozen=True)
class BertParams:
    n_layers: int
    n_embd: int
    n_ff: int
    n_head: int
    n_ctx: int
    n_vocab: int
    n_token_types: int
    norm_eps: float
    pooling: str  # a key of POOLING
    labels: list[str] | None  # classification head labels


def read_params(model_dir: Path, pooling: str | None = None) -> BertParams:
    """The checkpoint's parameters; ``pooling`` overrides the pooling it declares."""
    config = read_config(model_dir)
    try:
        params = BertParams(
            n_layers=int(config["num_hidden_layers"]),
            n_embd=int(config["hidden_size"]),
            n_ff=int(config["intermediate_size"]),
            n_head=int(config["num_attention_heads"]),
            n_ctx=int(config.get("max_position_embeddings", 512)),
            n_vocab=int(config["vocab_size"]),
            n_token_types=int(config.get("type_vocab_size", 2)),
            norm_eps=float(config.get("layer_norm_eps", 1e-12)),
            pooling="",
            labels=classifier_labels(config),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConversionError(f"{model_dir / 'config.json'}: missing or bad {exc}") from exc
    chosen = _pooling(model_dir, params.labels, pooling)
    return dataclasses.replace(params, pooling=chosen)


def read_config(model_dir: Path) -> dict:
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


def classifier_labels(config: dict) -> list[str] | None:
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


def _pooling(model_dir: Path, labels: list[str] | None, requested: str | None) -> str:
    """``requested``, else what the checkpoint declares, else rank for a classifier, else mean."""
    if requested is not None:
        if requested not in POOLING:
            raise ConversionError(f"pooling {requested!r} (want one of {', '.join(POOLING)})")
        return requested
    declared = sentence_pooling(model_dir)
    if declared is not None:
        return declared
    return "rank" if labels else "mean"
