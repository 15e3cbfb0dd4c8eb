"""Control vectors (--control-vector, --control-vector-scaled, --control-vector-layer-range):
files read and summed as llama.cpp's loader does, and reaching the context's output."""

from __future__ import annotations

import numpy as np
import pytest

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.cli.usage import UsageError
from mlxcel.engine.control_vectors import ControlVectorError, ControlVectors, combined_directions
from mlxcel.engine.llama_runtime import ModelLoadError
from tests.fixtures.control_vector import N_EMBD, write_control_vector
from tests.runtime_logits import smollm2_logits


@pytest.fixture(scope="module")
def vectors(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cvec")
    return write_control_vector(folder / "a.gguf", seed=1), write_control_vector(folder / "b.gguf", range(3, 5), 2)


def test_files_add_up_with_their_scales(vectors):
    a, b = vectors
    one, n_embd = combined_directions(((str(a), 1.0),))
    both, _ = combined_directions(((str(a), 0.5), (str(b), 2.0)))
    only_b, _ = combined_directions(((str(b), 1.0),))
    assert n_embd == N_EMBD and one.size == 29 * N_EMBD and only_b.size == 4 * N_EMBD
    assert not only_b[: 2 * N_EMBD].any()  # layers 1 and 2: nothing
    assert np.allclose(both[: 4 * N_EMBD], 0.5 * one[: 4 * N_EMBD] + 2.0 * only_b)


def test_flags_as_llama_server_reads_them(vectors):
    a, b = vectors
    config = parse_serve_args(["--control-vector", str(a), "--control-vector-scaled", f"{b}:-0.5",
                               "--control-vector-layer-range", "2", "9"])
    assert config.control_vectors == ControlVectors(((str(a), 1.0), (str(b), -0.5)), 2, 9)
    assert config.ignored_flags == []
    for argv in (["--control-vector", "/nonexistent.gguf"], ["--control-vector-scaled", str(a)],
                 ["--control-vector-layer-range", "5", "2"], ["--control-vector-layer-range", "0", "2"]):
        with pytest.raises(UsageError):
            parse_serve_args(argv)


def _last_logits(vectors: ControlVectors) -> np.ndarray:
    return smollm2_logits(control_vectors=vectors)[0]


def test_the_vectors_reach_the_output_within_their_layer_range(vectors):
    a, _ = vectors
    plain = _last_logits(ControlVectors())
    steered = _last_logits(ControlVectors(((str(a), 1.0),)))
    beyond = _last_logits(ControlVectors(((str(a), 1.0),), 40, 50))  # SmolLM2 has 30 layers
    assert np.abs(steered - plain).max() > 0.5
    assert np.array_equal(beyond, plain)


def test_a_file_that_is_not_a_control_vector_fails_the_load(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(ControlVectorError):
        combined_directions(((str(junk), 1.0),))
    with pytest.raises(ModelLoadError, match="control vectors"):
        _last_logits(ControlVectors(((str(junk), 1.0),)))
