"""Fixtures: the real SmolLM2 vocabulary (loaded without weights) and its grammar
tokenizer, shared by the whole session."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.structured import grammar_tokenizer

ROOT = Path(__file__).resolve().parents[3]
MODEL = Path.home() / ".cache" / "mlxcel" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


# llama.cpp's own test vocabularies, unpacked with the reference sources (bench/reference.py)
REFERENCE_VOCABS = (
    Path.home() / ".cache/mlxcel/reference/0.3.36/src/llama_cpp_python-0.3.36/vendor/llama.cpp/models"
)


def _unpack_reference_sources() -> None:
    """llama.cpp's test vocabularies come with the llama-cpp-python sdist the project
    pins (bench/reference.py downloads and unpacks it once into the cache)."""
    spec = importlib.util.spec_from_file_location("bench_reference", ROOT / "bench" / "reference.py")
    reference = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reference)
    reference.ensure_source()


def load_vocab_only(path: Path):
    """A llama_model holding only the vocabulary of a GGUF file (free it when done)."""
    if not path.exists() and path.is_relative_to(REFERENCE_VOCABS):
        _unpack_reference_sources()
    assert path.exists(), f"{path} is missing"
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert model, f"could not load the vocabulary of {path.name}"
    return model


@pytest.fixture(scope="session")
def vocab_model():
    model = load_vocab_only(MODEL)
    yield model
    llama_cpp.llama_model_free(model)


@pytest.fixture(scope="session")
def tokenizer(vocab_model) -> Tokenizer:
    return Tokenizer(llama_cpp.llama_model_get_vocab(vocab_model))


@pytest.fixture(scope="session")
def lltokenizer(tokenizer):
    return grammar_tokenizer(tokenizer)


@pytest.fixture(scope="session")
def piece_lengths(tokenizer) -> np.ndarray:
    return np.array([len(tokenizer.piece(t)) for t in range(tokenizer.n_vocab)])
