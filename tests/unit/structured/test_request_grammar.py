"""llama-server's output-constraint fields read into one grammar: `grammar` (GBNF),
`json_schema` and every `response_format` form its chat route accepts."""

from __future__ import annotations

import json

import pytest

from mlxcel.structured import (
    ConflictingConstraintsError,
    GrammarError,
    ResponseFormat,
    ResponseFormatError,
    SchemaLimitError,
    request_grammar,
)
from mlxcel.structured.grammar import MAX_GRAMMAR_BYTES, json_schema_grammar

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
OTHER = {"type": "string"}
YES_NO = 'root ::= "yes" | "no"'


@pytest.mark.parametrize("fields", [{}, {"grammar": ""}, {"response_format": {"type": "text"}},
                                    {"grammar": None, "json_schema": None, "response_format": None}])
def test_nothing_constraining_is_free_text(fields):
    assert request_grammar(**fields) is None


def test_grammar_is_kept_as_gbnf_text_for_the_compile():
    spec = request_grammar(grammar=YES_NO, response_format={"type": "text"})
    assert (spec.kind, spec.grammar) == ("gbnf", YES_NO)


def test_json_schema_field_is_that_schema():
    spec = request_grammar(json_schema=SCHEMA)
    assert spec.kind == "json_schema" and spec.grammar == json_schema_grammar(SCHEMA)


@pytest.mark.parametrize("fields", [
    {"json_schema": {}},
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_object", "schema": {}}},
    {"response_format": {"type": "json_schema"}},  # llama-server: an absent schema means any object
    {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
])
def test_absent_or_empty_schema_means_any_object(fields):
    spec = request_grammar(**fields)
    assert spec is not None
    assert spec.grammar == json_schema_grammar({"type": "object"})


def test_json_object_with_schema_is_that_schema():
    """llama-server's own form: {"type": "json_object", "schema": {...}}."""
    spec = request_grammar(response_format={"type": "json_object", "schema": SCHEMA})
    assert spec.kind == "json_schema" and spec.grammar == json_schema_grammar(SCHEMA)


def test_json_schema_wrapper_form():
    spec = request_grammar(response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}})
    assert spec.grammar == json_schema_grammar(SCHEMA) and spec.name == "n"


def test_response_format_precedence_over_json_schema_field():
    """As llama-server's chat parsing: a plain json_object keeps the json_schema field,
    a response_format carrying a schema replaces it."""
    plain = request_grammar(json_schema=SCHEMA, response_format={"type": "json_object"})
    assert plain.grammar == json_schema_grammar(SCHEMA)
    with_schema = request_grammar(json_schema=SCHEMA, response_format={"type": "json_object", "schema": OTHER})
    assert with_schema.grammar == json_schema_grammar(OTHER)
    wrapped = request_grammar(json_schema=SCHEMA, response_format={"type": "json_schema",
                                                                   "json_schema": {"schema": OTHER}})
    assert wrapped.grammar == json_schema_grammar(OTHER)


@pytest.mark.parametrize("other", [
    {"json_schema": SCHEMA},
    {"json_schema": {}},
    {"response_format": {"type": "json_object"}},
    {"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}},
])
def test_grammar_with_a_schema_is_refused(other):
    with pytest.raises(ConflictingConstraintsError, match="Cannot use both json_schema and grammar"):
        request_grammar(grammar=YES_NO, **other)


@pytest.mark.parametrize("fields, error, words", [
    ({"grammar": 3}, GrammarError, "grammar must be a string"),
    ({"grammar": "root ::= " + '"x" ' * (MAX_GRAMMAR_BYTES // 4)}, GrammarError, "larger than 64 KiB"),
    ({"json_schema": "{}"}, ResponseFormatError, "json_schema must be an object"),
    ({"response_format": {"type": "json_object", "schema": 123}}, ResponseFormatError, "schema must be an object"),
    ({"response_format": {"type": "sound"}}, ResponseFormatError, "response_format.type"),
    ({"json_schema": {"a": "x" * 70_000}}, SchemaLimitError, "larger than 64 KiB"),
])
def test_malformed_fields_are_refused(fields, error, words):
    with pytest.raises(error, match=words):
        request_grammar(**fields)


def test_grammar_errors_read_like_llama_servers():
    assert str(GrammarError("why")) == "Failed to parse grammar: why"


def test_bare_schema_helper_checks_limits():
    deep: dict = {}
    node = deep
    for _ in range(40):
        node["items"] = {}
        node = node["items"]
    with pytest.raises(SchemaLimitError):
        ResponseFormat.from_schema(deep)
    assert json.dumps(ResponseFormat.from_schema({}).schema) == '{"type": "object"}'
