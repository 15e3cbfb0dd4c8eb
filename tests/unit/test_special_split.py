"""Tokenizing a long text in pieces cut at special tokens gives exactly llama.cpp's
tokens for the whole text, on every vocabulary llama.cpp ships a test file for (BPE,
SentencePiece, WordPiece, Unigram), with texts built to probe the edges: special
tokens back to back, after blanks, inside words, partial ones, and the vocabulary's
own oddities (whitespace tokens, lstrip/rstrip tokens)."""

from __future__ import annotations

import random
import time

import llama_cpp
import pytest

from mlxcel.engine import special_split
from mlxcel.engine.tokenizer import Tokenizer
from tests.unit.structured.conftest import MODEL, REFERENCE_VOCABS, load_vocab_only

VOCABS = ["llama-spm", "llama-bpe", "phi-3", "gpt-neox", "bert-bge", "qwen2", "command-r", "deepseek-llm",
          "starcoder", "gemma-4", "nomic-bert-moe", "falcon"]
WORDS = ["hello", "world", " ", "  ", "\n", "\t", "Ünïcödé", "✓", "12", "def", "(", ")", "##", "<", ">", "|", "a"]


def _vocab_path(name: str):
    return REFERENCE_VOCABS / f"ggml-vocab-{name}.gguf"


def _texts(tokenizer: Tokenizer, rng: random.Random, n: int) -> list[str]:
    specials = sorted(tokenizer._splitters[True]._texts)[:400] or ["<s>"]
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(200, 900)):
            roll = rng.random()
            if roll < 0.35:
                parts.append(rng.choice(specials))
            elif roll < 0.42:
                special = rng.choice(specials)
                parts.append(special[: rng.randint(0, len(special))])  # a partial one
            else:
                parts.append(rng.choice(WORDS))
        texts.append("".join(parts))
    return texts


@pytest.fixture(params=VOCABS)
def vocab_tokenizer(request):
    model = load_vocab_only(_vocab_path(request.param))
    yield Tokenizer(llama_cpp.llama_model_get_vocab(model))
    llama_cpp.llama_model_free(model)


def test_pieces_tokenize_exactly_as_the_whole(vocab_tokenizer, monkeypatch):
    monkeypatch.setattr(special_split, "PIECE_OCCURRENCES", 7)  # many cuts per text
    monkeypatch.setattr(special_split, "MIN_SPLIT_CHARS", 0)
    rng = random.Random(1234)
    cut_somewhere = False
    for text in _texts(vocab_tokenizer, rng, 6):
        for parse_special in (True, False):
            cut_somewhere |= len(vocab_tokenizer._splitters[parse_special].pieces(text)) > 1
            for add_special in (True, False):
                whole = vocab_tokenizer._encode(text, add_special, parse_special)
                assert vocab_tokenizer.encode(text, add_special=add_special, parse_special=parse_special) == whole
    assert cut_somewhere


def test_a_megabyte_of_special_tokens_tokenizes_in_linear_time():
    model = load_vocab_only(MODEL)
    try:
        tokenizer = Tokenizer(llama_cpp.llama_model_get_vocab(model))
        started = time.perf_counter()
        tokens = tokenizer.encode("<|im_end|>" * 100_000, add_special=False)
        elapsed = time.perf_counter() - started
    finally:
        llama_cpp.llama_model_free(model)
    assert tokens == [tokens[0]] * 100_000
    assert elapsed < 5.0  # whole, llama.cpp's scan took about 25 s here
