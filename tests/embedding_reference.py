"""A plain numpy BERT sentence embedder: the reference our GGUF pipeline is held to.

Everything is read from the original checkpoint (``model.safetensors``,
``config.json``, ``tokenizer.json``), never from the converted GGUF, so a mistake in
the converter or in the serving code cannot hide in both sides at once.

- ``WordPieceTokenizer``: HF's BertNormalizer + BertPreTokenizer + WordPiece, with
  [CLS] ... [SEP] around the text.
- ``BertReference.embed(texts)``: mean-pooled (over every token, [CLS]/[SEP]
  included, as sentence-transformers does without padding) and L2-normalised vectors,
  computed in float64 with exact (erf) GELU.
- ``cosine(a, b)``.

Use: ``ref = BertReference(minilm_source_dir()); ref.embed(["a sentence"])``.
"""

from __future__ import annotations

import json
import math
import unicodedata
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file


class WordPieceTokenizer:
    def __init__(self, tokenizer_json: Path) -> None:
        data = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
        model = data["model"]
        self.vocab: dict[str, int] = dict(model["vocab"])
        for added in data.get("added_tokens") or []:
            self.vocab[added["content"]] = added["id"]
        self.unk = model.get("unk_token", "[UNK]")
        self.prefix = model.get("continuing_subword_prefix", "##")
        self.max_chars = model.get("max_input_chars_per_word", 100)
        normaliser = data.get("normalizer") or {}
        self.lowercase = bool(normaliser.get("lowercase", True))
        strip = normaliser.get("strip_accents")
        self.strip_accents = self.lowercase if strip is None else bool(strip)

    def normalise(self, text: str) -> str:
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or _is_control(ch):
                continue
            if _is_whitespace(ch):
                out.append(" ")
            elif _is_chinese(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        text = "".join(out)
        if self.strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        return text.lower() if self.lowercase else text

    def words(self, text: str) -> list[str]:
        words: list[str] = []
        for chunk in self.normalise(text).split():
            current = ""
            for ch in chunk:
                if _is_punctuation(ch):
                    if current:
                        words.append(current)
                    words.append(ch)
                    current = ""
                else:
                    current += ch
            if current:
                words.append(current)
        return words

    def wordpiece(self, word: str) -> list[int]:
        if len(word) > self.max_chars:
            return [self.vocab[self.unk]]
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while end > start:
                piece = word[start:end] if start == 0 else self.prefix + word[start:end]
                if piece in self.vocab:
                    found = self.vocab[piece]
                    break
                end -= 1
            if found is None:
                return [self.vocab[self.unk]]
            ids.append(found)
            start = end
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids with [CLS] first and [SEP] last."""
        ids = [self.vocab["[CLS]"]]
        for word in self.words(text):
            ids.extend(self.wordpiece(word))
        return ids + [self.vocab["[SEP]"]]


def _is_whitespace(ch: str) -> bool:
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_chinese(cp: int) -> bool:
    ranges = (
        (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
    )
    return any(lo <= cp <= hi for lo, hi in ranges)


_erf = np.vectorize(math.erf)


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


class BertReference:
    """The checkpoint in ``model_dir`` run by numpy (float64)."""

    def __init__(self, model_dir: Path) -> None:
        model_dir = Path(model_dir)
        self.config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        self.tokenizer = WordPieceTokenizer(model_dir / "tokenizer.json")
        raw = load_file(str(model_dir / "model.safetensors"))
        self.w = {k.removeprefix("bert."): v.astype(np.float64) for k, v in raw.items() if v.dtype.kind == "f"}

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        return _layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.config["layer_norm_eps"])

    def hidden_states(self, ids: list[int]) -> np.ndarray:
        """The last layer's output, one row per token."""
        n = len(ids)
        x = (
            self.w["embeddings.word_embeddings.weight"][ids]
            + self.w["embeddings.position_embeddings.weight"][:n]
            + self.w["embeddings.token_type_embeddings.weight"][0]
        )
        x = self._norm(x, "embeddings.LayerNorm")
        heads = self.config["num_attention_heads"]
        head_dim = self.config["hidden_size"] // heads
        for layer in range(self.config["num_hidden_layers"]):
            p = f"encoder.layer.{layer}"
            q, k, v = (
                self._linear(x, f"{p}.attention.self.{part}").reshape(n, heads, head_dim).transpose(1, 0, 2)
                for part in ("query", "key", "value")
            )
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(head_dim)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = scores / scores.sum(axis=-1, keepdims=True)
            context = (probs @ v).transpose(1, 0, 2).reshape(n, heads * head_dim)
            x = self._norm(x + self._linear(context, f"{p}.attention.output.dense"), f"{p}.attention.output.LayerNorm")
            inner = self._linear(x, f"{p}.intermediate.dense")
            inner = 0.5 * inner * (1.0 + _erf(inner / math.sqrt(2.0)))
            x = self._norm(x + self._linear(inner, f"{p}.output.dense"), f"{p}.output.LayerNorm")
        return x

    def embed(self, texts: list[str]) -> np.ndarray:
        """One L2-normalised, mean-pooled vector per text (rows)."""
        rows = []
        for text in texts:
            pooled = self.hidden_states(self.tokenizer.encode(text)).mean(axis=0)
            rows.append(pooled / np.linalg.norm(pooled))
        return np.stack(rows)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
