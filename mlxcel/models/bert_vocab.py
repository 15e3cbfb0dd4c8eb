"""The WordPiece vocabulary of a BERT checkpoint, in llama.cpp's GGUF form.

llama.cpp's WPM tokenizer marks word starts, not continuations: a token that begins
a word carries a leading "▁" (U+2581) and a "##" continuation loses its "##". Control
tokens ([CLS], [SEP], ...) stay as they are. Ids the vocabulary lacks become unused
"[PAD<id>]" fillers, as llama.cpp's converter writes them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import gguf

from mlxcel.models.errors import ConversionError

PHANTOM_SPACE = "\u2581"
CONTINUATION = "##"
# llama.cpp reads these BertNormalizer flags; gguf 0.19 has no constants for them
LOWERCASE_KEY = "tokenizer.ggml.normalizer.lowercase"
STRIP_ACCENTS_KEY = "tokenizer.ggml.normalizer.strip_accents"


@dataclass(frozen=True)
class WordPieceVocab:
    tokens: list[str]  # llama.cpp's form, index = token id
    token_types: list[int]  # gguf.TokenType values
    lowercase: bool | None  # the normaliser's lowercase flag, when the tokenizer says
    strip_accents: bool | None


def to_llama_token(token: str, token_type: int) -> str:
    """HF WordPiece spelling → llama.cpp's ("##ing" → "ing", "play" → "▁play")."""
    if token_type == gguf.TokenType.CONTROL:
        return token
    if token.startswith(CONTINUATION):
        return token[len(CONTINUATION):]
    return PHANTOM_SPACE + token


def _from_tokenizer_json(path: Path) -> tuple[dict[str, int], dict[int, bool], dict[str, object]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    model = data.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise ConversionError(f"{path}: not a WordPiece tokenizer (model type {model.get('type')!r})")
    vocab = {str(token): int(index) for token, index in model["vocab"].items()}
    added: dict[int, bool] = {}
    for entry in data.get("added_tokens") or []:
        vocab[str(entry["content"])] = int(entry["id"])
        added[int(entry["id"])] = bool(entry.get("special"))
    return vocab, added, data.get("normalizer") or {}


def _from_vocab_txt(model_dir: Path) -> tuple[dict[str, int], dict[int, bool], dict[str, object]]:
    lines = (model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab = {line: index for index, line in enumerate(lines)}
    special_map = model_dir / "special_tokens_map.json"
    names = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    if special_map.is_file():
        values = json.loads(special_map.read_text(encoding="utf-8")).values()
        names = [v if isinstance(v, str) else v.get("content", "") for v in values]
    added = {vocab[name]: True for name in names if name in vocab}
    return vocab, added, {}


def _normaliser_flags(normaliser: dict[str, object]) -> tuple[bool | None, bool | None]:
    """lowercase / strip_accents of a BertNormalizer (or one inside a Sequence)."""
    if normaliser.get("type") == "Sequence":
        for inner in normaliser.get("normalizers") or []:  # type: ignore[attr-defined]
            flags = _normaliser_flags(inner)
            if flags != (None, None):
                return flags
        return None, None
    if normaliser.get("type") != "BertNormalizer":
        return None, None
    lowercase = normaliser.get("lowercase")
    strip = normaliser.get("strip_accents")
    return (
        lowercase if isinstance(lowercase, bool) else None,
        strip if isinstance(strip, bool) else None,
    )


def read_vocab(model_dir: Path, vocab_size: int) -> WordPieceVocab:
    """The vocabulary of ``model_dir`` (tokenizer.json, else vocab.txt), ``vocab_size`` long."""
    tokenizer_json = model_dir / "tokenizer.json"
    if tokenizer_json.is_file():
        vocab, added, normaliser = _from_tokenizer_json(tokenizer_json)
    elif (model_dir / "vocab.txt").is_file():
        vocab, added, normaliser = _from_vocab_txt(model_dir)
    else:
        raise ConversionError(f"{model_dir}: neither tokenizer.json nor vocab.txt")
    by_id = {index: token for token, index in vocab.items()}
    if by_id and max(by_id) >= vocab_size:
        raise ConversionError(f"{model_dir}: token id {max(by_id)} beyond vocab_size {vocab_size}")
    tokens: list[str] = []
    types: list[int] = []
    for index in range(vocab_size):
        token = by_id.get(index)
        if token is None:
            tokens.append(f"[PAD{index}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        special = added.get(index)
        kind = gguf.TokenType.NORMAL
        if special is True:
            kind = gguf.TokenType.CONTROL
        elif special is False:
            kind = gguf.TokenType.USER_DEFINED
        tokens.append(to_llama_token(token, kind))
        types.append(int(kind))
    lowercase, strip = _normaliser_flags(normaliser)
    return WordPieceVocab(tokens, types, lowercase, strip)


def write_vocab(writer: gguf.GGUFWriter, model_dir: Path, vocab: WordPieceVocab, type_count: int) -> None:
    """Tokenizer metadata: model "bert", tokens, types, special ids and add_* flags."""
    writer.add_token_type_count(type_count)
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")  # llama.cpp reads no pre-tokenizer for WPM
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    if vocab.lowercase is not None:
        writer.add_bool(LOWERCASE_KEY, vocab.lowercase)
    if vocab.strip_accents is not None:
        writer.add_bool(STRIP_ACCENTS_KEY, vocab.strip_accents)
    # special ids (CLS as bos, SEP as eos, ...) and add_bos/add_eos from the tokenizer's
    # post-processor, read the way llama.cpp's converter reads them
    vocab_log = logging.getLogger("gguf.vocab")
    level = vocab_log.level
    vocab_log.setLevel(logging.ERROR)  # it warns that it has no "cls" key: CLS is written as bos
    try:
        special = gguf.SpecialVocab(model_dir, n_vocab=len(vocab.tokens))
        special.add_to_gguf(writer, quiet=True)
    finally:
        vocab_log.setLevel(level)
