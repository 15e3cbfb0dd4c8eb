"""Simulated constrained generation: every walk must end in JSON the schema accepts."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlxcel.structured import ResponseFormat, compile_constraint

from .walk import lowest_allowed, random_logits, walk

BOUNDED = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "kind": {"enum": ["cat", "dog", "axolotl"]},
        "age": {"type": "integer", "minimum": 3, "maximum": 250},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2},
        "owner": {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "vip": {"type": "boolean"}},
            "required": ["id", "vip"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "kind", "age", "ok", "tags", "owner"],
    "additionalProperties": False,
}

ANIMAL = {  # the spec's example
    "type": "object",
    "properties": {
        "animal": {"type": "string"},
        "habitat": {"type": "string", "enum": ["forest", "desert", "ocean", "urban", "unknown"]},
    },
    "required": ["animal", "habitat"],
    "additionalProperties": False,
}


def constraint_for(schema, lltokenizer):
    fmt = ResponseFormat.parse({"type": "json_schema", "json_schema": {"name": "t", "schema": schema}})
    return compile_constraint(fmt.grammar_spec(), lltokenizer)


def generate_and_validate(schema, tokenizer, lltokenizer, choose):
    text = walk(constraint_for(schema, lltokenizer), tokenizer, choose)
    jsonschema.validate(json.loads(text), schema)
    return text


def test_lowest_token_walk(tokenizer, lltokenizer):
    text = generate_and_validate(BOUNDED, tokenizer, lltokenizer, lowest_allowed(tokenizer.n_vocab))
    assert set(json.loads(text)) == set(BOUNDED["required"])


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("schema", [BOUNDED, ANIMAL], ids=["bounded", "animal"])
def test_random_walk(tokenizer, lltokenizer, piece_lengths, schema, seed):
    generate_and_validate(schema, tokenizer, lltokenizer, random_logits(seed, piece_lengths))


@pytest.mark.parametrize("seed", range(4))
def test_json_object_walk(tokenizer, lltokenizer, piece_lengths, seed):
    fmt = ResponseFormat.parse({"type": "json_object"})
    # a strong bias to short tokens keeps nested values from growing without end
    text = walk(compile_constraint(fmt.grammar_spec(), lltokenizer), tokenizer,
                random_logits(seed, piece_lengths, short_bonus=8.0), max_steps=20_000)
    assert isinstance(json.loads(text), dict)


# -- property tests over generated schemas -------------------------------------------

names = st.text("abcdefghij_", min_size=1, max_size=6)
enum_values = st.text(st.sampled_from('ab z"\\é/\n'), max_size=5)


def _string():
    return st.builds(
        lambda lo, hi, bounded: {"type": "string", **({"minLength": lo, "maxLength": lo + hi} if bounded else {})},
        st.integers(0, 4), st.integers(0, 6), st.booleans(),
    )


def _integer():
    return st.builds(
        lambda lo, span, bounded: {"type": "integer", **({"minimum": lo, "maximum": lo + span} if bounded else {})},
        st.integers(-1000, 1000), st.integers(0, 5000), st.booleans(),
    )


leaves = st.one_of(
    _string(),
    _integer(),
    st.just({"type": "boolean"}),
    st.lists(enum_values, min_size=1, max_size=4, unique=True).map(lambda v: {"enum": v}),
)


def _array(items):
    return st.builds(
        lambda it, hi: {"type": "array", "items": it, **({"maxItems": hi} if hi is not None else {})},
        items, st.one_of(st.none(), st.integers(0, 3)),
    )


def _object(values):
    def build(props, data):
        keys = sorted(props)
        required = data.draw(st.lists(st.sampled_from(keys), unique=True)) if keys else []
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False}

    return st.builds(build, st.dictionaries(names, values, min_size=1, max_size=4), st.data())


schemas = _object(st.recursive(leaves, lambda children: st.one_of(_array(children), _object(children)), max_leaves=8))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=schemas, seed=st.integers(0, 2**32 - 1))
def test_generated_schemas_yield_valid_json(tokenizer, lltokenizer, piece_lengths, schema, seed):
    generate_and_validate(schema, tokenizer, lltokenizer, random_logits(seed, piece_lengths))
