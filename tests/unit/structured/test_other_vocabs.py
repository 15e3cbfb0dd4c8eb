"""Other llama.cpp vocabularies (its test files, when the reference sources are here):
a 152k BPE, a SentencePiece one, and a WordPiece one that llguidance cannot use."""

from __future__ import annotations

import json

import jsonschema
import llama_cpp
import numpy as np
import pytest

from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.structured import ResponseFormat, UnsupportedTokenizerError, compile_constraint, grammar_tokenizer

from .conftest import REFERENCE_VOCABS, load_vocab_only
from .test_generation import BOUNDED
from .walk import random_logits, walk


@pytest.mark.parametrize("name", ["qwen2", "llama-spm"])
def test_constrained_walk_on_other_vocabularies(name):
    model = load_vocab_only(REFERENCE_VOCABS / f"ggml-vocab-{name}.gguf")
    try:
        tokenizer = Tokenizer(llama_cpp.llama_model_get_vocab(model))
        lltokenizer = grammar_tokenizer(tokenizer)
        assert lltokenizer.vocab_size == tokenizer.n_vocab
        lengths = np.array([len(tokenizer.piece(t)) for t in range(tokenizer.n_vocab)])
        spec = ResponseFormat.parse({"type": "json_schema", "json_schema": {"schema": BOUNDED}}).grammar_spec()
        for seed in range(3):
            text = walk(compile_constraint(spec, lltokenizer), tokenizer, random_logits(seed, lengths))
            jsonschema.validate(json.loads(text), BOUNDED)
    finally:
        llama_cpp.llama_model_free(model)


def test_unusable_vocabulary_is_reported_every_time():
    model = load_vocab_only(REFERENCE_VOCABS / "ggml-vocab-bert-bge.gguf")
    try:
        tokenizer = Tokenizer(llama_cpp.llama_model_get_vocab(model))
        for _ in range(2):
            with pytest.raises(UnsupportedTokenizerError, match="does not support structured output"):
                grammar_tokenizer(tokenizer)
    finally:
        llama_cpp.llama_model_free(model)
