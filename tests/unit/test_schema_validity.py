"""A tool's parameters: a schema that breaks JSON Schema is a 400; one the grammar
engine cannot express is served (the forced call then gets the instruction only)."""

from __future__ import annotations

import pytest

from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.tool_choice import plan_tools
from mlxcel.structured.schema_validity import schema_problem

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize(("schema", "needle"), [
    ({"type": "bogus"}, "(at type)"),
    ({"type": "object", "required": "city"}, "'…' is not of type 'array' (at required)"),
    ({"type": "object", "properties": [1]}, "(at properties)"),
    ({"type": "object", "properties": {"a": {"minLength": "x"}}}, "(at properties/a/minLength)"),
])
def test_a_broken_schema_is_named(schema, needle):
    problem = schema_problem(schema)
    assert problem is not None and needle in problem


@pytest.mark.parametrize("schema", [
    WEATHER,
    {},
    {"type": "object", "x-vendor": {"anything": 1}},
    {"type": "object", "properties": {"a": {"not": {"type": "string"}}}},  # llguidance: unimplemented
    {"type": "object", "properties": {"a": {"type": "string", "format": "weird"}}},  # an unknown format
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "(?<=a)b"}}},  # a look-behind
    # draft-04's boolean exclusiveMinimum, read as the draft its $schema names
    {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
     "properties": {"a": {"type": "number", "minimum": 0, "exclusiveMinimum": True}}},
])
def test_a_schema_is_accepted_even_where_no_grammar_expresses_it(schema):
    assert schema_problem(schema) is None


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"secret_name": {"type": "string", "pattern": "secret_pat("}}},
    {"type": "object", "properties": {"secret_name": {"minLength": "secret_value"}}},
    {"type": "object", "required": "secret_value"},
    {"type": "secret_type"},
])
def test_a_broken_schema_is_not_echoed(schema):
    """Spec 001: schema content is never echoed in errors. The meta-schema quotes the
    value it refuses and the path to it: the verdict and the schema's own words stay."""
    problem = schema_problem(schema)
    assert problem is not None and "secret" not in problem.lower()
    assert "…" in problem


def test_a_long_complaint_is_cut():
    problem = schema_problem({"type": "object", "properties": {"a": {"enum": "x" * 10_000}}})
    assert problem is not None and len(problem) < 400 and problem.endswith("(at properties/a/enum)")


@pytest.mark.parametrize("choice", [None, "auto", "none", "required"])
def test_plan_tools_refuses_a_broken_tool_whatever_the_choice(choice):
    tools = [{"type": "function", "function": {"name": "ok", "parameters": WEATHER}},
             {"type": "function", "function": {"name": "bad", "parameters": {"type": "bogus"}}}]
    with pytest.raises(ChatInputError, match=r"^tools\[1\] \('bad'\): its parameters are not a valid JSON schema"):
        plan_tools(tools, choice)
    assert plan_tools(tools[:1], choice).tools in ([], tools[:1])


def test_a_schema_beyond_the_limits_is_not_judged():
    """Nothing builds a grammar from it (the forced call gets the instruction only), and
    the meta-schema's recursive walk is never run on it."""
    deep: dict = {"type": "bogus"}
    for _ in range(40):
        deep = {"type": "object", "properties": {"a": deep}}
    assert schema_problem(deep) is None
