"""The converted all-MiniLM-L6-v2 is the same model: llama.cpp, running our GGUF,
tokenises as the checkpoint's tokenizer.json does and embeds as a plain numpy forward
pass over the original safetensors weights does (cosine >= 0.999)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mlxcel.models.bert_gguf import convert_bert
from tests.embedding_reference import BertReference, cosine
from tests.fixtures.minilm import minilm_gguf, minilm_source
from tests.llama_embedding import LlamaEmbedder

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on stage.",
    "Tokenization of unbelievably long, hyphenated words: state-of-the-art!",
    "Café déjà vu, naïve résumé (accents are stripped).",
    "How do I reset my password?",
    "42 apples cost $3.50 in 2024; that's 8.3 cents each.",
]


@pytest.fixture(scope="module")
def reference() -> BertReference:
    return BertReference(minilm_source())


@pytest.fixture(scope="module")
def expected(reference: BertReference) -> np.ndarray:
    return reference.embed(SENTENCES)


@pytest.fixture(scope="module")
def llama_f16() -> Iterator[LlamaEmbedder]:
    embedder = LlamaEmbedder(minilm_gguf(), n_seq=len(SENTENCES))
    yield embedder
    embedder.close()


def test_llama_tokens_equal_the_tokenizer_json_wordpiece(llama_f16: LlamaEmbedder, reference: BertReference) -> None:
    for sentence in SENTENCES:
        assert llama_f16.tokenize(sentence) == reference.tokenizer.encode(sentence), sentence
    assert llama_f16.tokenize("hello")[0] == 101 and llama_f16.tokenize("hello")[-1] == 102


def test_llama_reads_the_gguf_as_a_mean_pooled_encoder(llama_f16: LlamaEmbedder) -> None:
    assert llama_f16.n_embd == 384
    assert llama_f16.meta("general.architecture") == "bert"
    assert llama_f16.meta("bert.pooling_type") == "1"


def test_f16_gguf_embeddings_match_the_numpy_reference(llama_f16: LlamaEmbedder, expected: np.ndarray) -> None:
    got = llama_f16.embed(SENTENCES)
    cosines = [cosine(g, e) for g, e in zip(got, expected)]
    print("F16 cosines:", [round(c, 6) for c in cosines])
    assert min(cosines) >= 0.999, cosines
    # unrelated sentences stay apart: the vectors are not all alike
    assert cosine(got[0], got[4]) < 0.5


def test_f32_gguf_embeddings_match_the_numpy_reference(tmp_path: Path, expected: np.ndarray) -> None:
    path = tmp_path / "minilm.f32.gguf"
    convert_bert(minilm_source(), path, outtype="f32")
    embedder = LlamaEmbedder(path, n_seq=len(SENTENCES))
    try:
        got = embedder.embed(SENTENCES)
    finally:
        embedder.close()
    cosines = [cosine(g, e) for g, e in zip(got, expected)]
    print("F32 cosines:", [round(c, 7) for c in cosines])
    assert min(cosines) >= 0.9999, cosines


def test_reference_tokenizer_handles_unknown_and_long_words(reference: BertReference) -> None:
    tok = reference.tokenizer
    assert tok.encode("") == [101, 102]
    assert tok.encode("\u2603") == [101, 100, 102]  # a snowman is not in the vocabulary
    assert tok.encode("x" * 101) == [101, 100, 102]  # longer than max_input_chars_per_word
