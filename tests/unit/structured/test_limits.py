from __future__ import annotations

import json

import pytest

from mlxcel.structured import ResponseFormat, SchemaLimitError, check_schema
from mlxcel.structured.limits import MAX_DEPTH, MAX_PATTERN_PROPERTIES, MAX_REFS, MAX_SCHEMA_BYTES

MARKER = "SECRET_FIELD_NAME"


def nested(levels: int) -> dict:
    """A schema whose JSON nesting is exactly `levels` objects deep."""
    node: dict = {"type": "string", "description": MARKER}
    for _ in range(levels - 1):
        node = {MARKER: node}
    return node


def assert_rejected(schema, words: str) -> None:
    with pytest.raises(SchemaLimitError) as info:
        check_schema(schema)
    message = str(info.value)
    assert words in message
    assert MARKER not in message and len(message) < 100


def test_a_reasonable_schema_passes():
    check_schema({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})


def test_size_limit():
    schema = {"type": "string", "description": MARKER + "x" * MAX_SCHEMA_BYTES}
    assert_rejected(schema, "64 KiB")
    assert_rejected(json.dumps(schema), "64 KiB")


def test_size_counts_utf8_bytes():
    schema = {"type": "string", "description": MARKER + "é" * (MAX_SCHEMA_BYTES // 2)}
    assert_rejected(schema, "64 KiB")


def test_depth_limit():
    check_schema(nested(MAX_DEPTH))
    assert_rejected(nested(MAX_DEPTH + 1), "32 levels")
    assert_rejected(json.dumps(nested(MAX_DEPTH + 1)), "32 levels")


def test_arrays_count_as_nesting():
    node: object = MARKER
    for _ in range(MAX_DEPTH + 1):
        node = [node]
    assert_rejected({"enum": node}, "32 levels")


def test_ref_limit():
    def with_refs(n: int) -> dict:
        props = {f"{MARKER}{i}": {"$ref": "#/$defs/x"} for i in range(n)}
        return {"$defs": {"x": {"type": "string"}}, "type": "object", "properties": props}

    check_schema(with_refs(MAX_REFS))
    assert_rejected(with_refs(MAX_REFS + 1), "$ref")


def test_hostile_depth_does_not_recurse():
    node: dict = {}
    for _ in range(200_000):  # far beyond Python's recursion limit
        node = {"a": node}
    assert_rejected(node, "32 levels")
    assert_rejected("[" * 30_000 + "]" * 30_000, "levels")


def test_shared_subtrees_are_bounded():
    node: dict = {"type": "string", "description": MARKER}
    for _ in range(60):  # 2**60 paths if walked naively
        node = {"anyOf": [node, node]}
    with pytest.raises(SchemaLimitError):
        check_schema(node)


def test_response_format_applies_the_limits():
    body = {"type": "json_schema", "json_schema": {"name": "x", "schema": nested(MAX_DEPTH + 5)}}
    with pytest.raises(SchemaLimitError) as info:
        ResponseFormat.parse(body)
    assert MARKER not in str(info.value)


@pytest.mark.parametrize("schema", [
    {"type": "integer", "minimum": -1e300, "maximum": -1e299},  # llguidance segfaulted on these
    {"type": "object", "properties": {MARKER: {"type": "integer", "const": -9223372036854775807}}},
    {"allOf": [{"type": "integer"}, {"enum": [-1e19]}]},
    {"type": "integer", "exclusiveMinimum": 2**63},  # was clamped to 2^63 - 1, then emitted
    {"type": "integer", "minimum": 1e300, "maximum": 1e301},
])
def test_numbers_beyond_64_bit_integers(schema):
    assert_rejected(schema, "2^63")
    assert_rejected(json.dumps(schema), "2^63")


def test_large_numbers_that_are_served_pass():
    check_schema({"type": "integer", "minimum": -(2**62), "maximum": 2**300, "const": 1e300,
                  "properties": {"minimum": {"type": "number"}}, "default": 2**64})


def test_pattern_properties_limit():
    def with_patterns(n: int) -> dict:
        return {"type": "object", "patternProperties": {f"^{MARKER}{i}_[a-z]+$": {"type": "integer"} for i in range(n)}}

    check_schema(with_patterns(MAX_PATTERN_PROPERTIES))
    check_schema({"type": "object", "properties": {"patternProperties": {"type": "string"}}})  # a property's name
    assert_rejected(with_patterns(MAX_PATTERN_PROPERTIES + 1), "patternProperties")
    assert_rejected({"anyOf": [{"type": "null"}, with_patterns(400)]}, "64 patternProperties")
    halves = [with_patterns(MAX_PATTERN_PROPERTIES // 2 + 1) for _ in range(2)]  # allOf merges them into one object
    halves[1]["patternProperties"] = {key + "x": value for key, value in halves[1]["patternProperties"].items()}
    assert_rejected({"allOf": halves}, "patternProperties")
