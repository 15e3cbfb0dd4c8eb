"""The embedding routes' pure parts: input shapes, llama-server's normalisations,
base64 as the OpenAI SDK decodes it."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from mlxcel.api.embeddings.wire import EmbeddingsRequest
from mlxcel.turn.embedding_vectors import floats_json, normalize, to_base64
from mlxcel.turn.errors import InvalidRequest


@pytest.mark.parametrize("value, expected", [
    ("hi", ["hi"]),
    (["a", "b"], ["a", "b"]),
    ([1, 2, 3], [[1, 2, 3]]),
    ([[1, 2], [3]], [[1, 2], [3]]),
    (["a", [5, 6]], ["a", [5, 6]]),
])
def test_input_shapes(value, expected):
    assert EmbeddingsRequest(input=value).inputs() == expected
    assert EmbeddingsRequest(content=value).inputs() == expected


@pytest.mark.parametrize("body, message", [
    ({}, '"input" or "content" must be provided'),
    ({"input": []}, "must not be empty"),
    ({"input": ["a", 1]}, "mixes token ids"),
    ({"input": [[1, -2]]}, "negative"),
    ({"input": ["x"] * 2049}, "at most 2048"),
])
def test_bad_inputs_are_refused(body, message):
    with pytest.raises(InvalidRequest, match=message):
        EmbeddingsRequest(**body).inputs()


def test_encoding_format_and_normalisation_fields():
    assert EmbeddingsRequest(input="x", encoding_format="base64").use_base64()
    assert not EmbeddingsRequest(input="x").use_base64()
    with pytest.raises(InvalidRequest, match="float or base64"):
        EmbeddingsRequest(input="x", encoding_format="int8").use_base64()
    assert EmbeddingsRequest(input="x").normalization(2) == 2
    assert EmbeddingsRequest(input="x", embd_normalize=-1).normalization(2) == -1
    with pytest.raises(InvalidRequest):
        EmbeddingsRequest(input="x", embd_normalize=-2).normalization(2)


def test_normalisations_match_llama_cpp():
    v = np.array([3.0, -4.0, 0.0], dtype=np.float32)
    assert normalize(v, -1).tolist() == [3.0, -4.0, 0.0]
    np.testing.assert_allclose(normalize(v, 0), [3 * 32760 / 4, -32760, 0])
    np.testing.assert_allclose(normalize(v, 1), [3 / 7, -4 / 7, 0])
    np.testing.assert_allclose(normalize(v, 2), [0.6, -0.8, 0])
    p3 = (27 + 64) ** (1 / 3)
    np.testing.assert_allclose(normalize(v, 3), [3 / p3, -4 / p3, 0], rtol=1e-6)
    assert normalize(np.zeros(3, dtype=np.float32), 2).tolist() == [0, 0, 0]
    # a huge p: the largest value's share, not an overflow to inf and a vector of zeros
    with np.errstate(over="raise"):
        np.testing.assert_allclose(normalize(v, 1_000_000), [0.75, -1.0, 0], rtol=1e-6)
        assert normalize(np.zeros(3, dtype=np.float32), 1_000_000).tolist() == [0, 0, 0]


def test_base64_is_little_endian_float32():
    v = np.array([0.5, -1.25, 3.0], dtype=np.float32)
    decoded = np.frombuffer(base64.b64decode(to_base64(v)), dtype="<f4")
    assert decoded.tolist() == [0.5, -1.25, 3.0]


def test_floats_json_gives_back_the_exact_float32_values():
    import json

    v = np.random.default_rng(0).standard_normal(2000).astype(np.float32) * np.float32(1e-3)
    v[:3] = [0.0, -0.0, 1e-30]
    assert np.array_equal(np.array(json.loads(floats_json(v)), dtype=np.float32), v)
    with pytest.raises(ValueError, match="non-finite"):
        floats_json(np.array([1.0, np.nan], dtype=np.float32))


def test_a_null_optional_field_reads_as_absent():
    """OpenAI's nullable fields (`dimensions`, `encoding_format`, `user`) and TEI's
    `truncate`, sent as null by clients that serialize every field: their defaults."""
    request = EmbeddingsRequest.model_validate({"input": "hi", "truncate": None, "dimensions": None,
                                                "encoding_format": None, "user": None})
    assert request.truncate is False and request.inputs() == ["hi"]
