"""Schema-guided coercion of argument text, and the JSON-span helpers."""

from __future__ import annotations

import json

import pytest

from mlxcel.chat.tool_parsers.coercion import arguments_json, coerce_value, items_schema, property_schema, schema_types
from mlxcel.chat.tool_parsers.json_spans import (
    Malformed,
    ValueEnd,
    arguments_text,
    call_list,
    raw_elements,
    raw_members,
    value_end,
)

STRING = {"type": "string"}


def test_string_keeps_raw_text_exactly():
    assert coerce_value("  42 ", STRING) == "  42 "
    assert coerce_value("true", STRING) == "true"
    assert coerce_value("\nline one\nline two\n", STRING) == "\nline one\nline two\n"
    assert coerce_value('{"a": 1}', STRING) == '{"a": 1}'


@pytest.mark.parametrize(
    ("raw", "schema", "expected"),
    [
        ("42", {"type": "integer"}, 42),
        (" 42\n", {"type": "integer"}, 42),
        ("3.0", {"type": "integer"}, 3),
        ("-7", {"type": "integer"}, -7),
        ("2.5", {"type": "number"}, 2.5),
        ("3", {"type": "number"}, 3),
        ("1e3", {"type": "number"}, 1000.0),
        ("true", {"type": "boolean"}, True),
        ("False", {"type": "boolean"}, False),
        ("null", {"type": "null"}, None),
        ("None", {"type": "null"}, None),
        ('{"a": [1, 2]}', {"type": "object"}, {"a": [1, 2]}),
        ("{'a': 'b', 'n': None}", {"type": "object"}, {"a": "b", "n": None}),
        ('["x", "y"]', {"type": "array"}, ["x", "y"]),
        ("('x', 'y')", {"type": "array"}, ["x", "y"]),
    ],
)
def test_typed_values(raw, schema, expected):
    value = coerce_value(raw, schema)
    assert value == expected
    assert type(value) is type(expected)


def test_unparseable_typed_value_falls_back_to_text():
    assert coerce_value("about five", {"type": "integer"}) == "about five"
    assert coerce_value("{broken", {"type": "object"}) == "{broken"
    assert coerce_value("", {"type": "integer"}) == ""


def test_type_lists_and_any_of():
    nullable_int = {"type": ["integer", "null"]}
    assert coerce_value("5", nullable_int) == 5
    assert coerce_value("null", nullable_int) is None
    string_or_null = {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert coerce_value("Paris", string_or_null) == "Paris"
    assert coerce_value("null", string_or_null) is None
    int_or_string = {"oneOf": [{"type": "integer"}, {"type": "string"}]}
    assert coerce_value("12", int_or_string) == 12
    assert coerce_value("12 apples", int_or_string) == "12 apples"
    # a value of the wrong JSON type keeps its text when a string is allowed
    assert coerce_value("true", {"type": ["integer", "string"]}) == "true"


def test_enum_and_const_imply_types():
    assert schema_types({"enum": ["a", "b"]}) == {"string"}
    assert coerce_value("1", {"enum": [1, 2]}) == 1
    assert coerce_value(" a", {"enum": ["a", "b"]}) == " a"
    assert schema_types({"properties": {}}) == {"object"}


def test_unknown_schema_reads_json_then_literals_then_text():
    assert coerce_value("42", None) == 42
    assert coerce_value("[1, 2]", {}) == [1, 2]
    assert coerce_value("True", None) is True
    assert coerce_value("Paris, France", None) == "Paris, France"
    assert coerce_value("007", None) == "007"
    assert coerce_value("2024-05-01", None) == "2024-05-01"
    assert coerce_value("__import__('os')", None) == "__import__('os')"


def test_schema_navigation():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
        "anyOf": [{"properties": {"b": {"type": "string"}}}],
    }
    assert property_schema(schema, "a") == {"type": "array", "items": {"type": "integer"}}
    assert property_schema(schema, "b") == {"type": "string"}
    assert property_schema(schema, "c") is None
    assert property_schema(None, "a") is None
    assert items_schema(property_schema(schema, "a")) == {"type": "integer"}


def test_arguments_json_is_compact_and_keeps_unicode():
    text = arguments_json({"city": "Zürich", "tags": ["雪", "☃"], "n": 1})
    assert text == '{"city":"Zürich","tags":["雪","☃"],"n":1}'
    assert json.loads(text)["city"] == "Zürich"


def test_value_end_tracks_strings_and_nesting():
    text = 'x{"a": "}]", "b": [1, {"c": "\\"}"}]} tail'
    assert value_end(text, 1) == text.index(" tail")
    assert value_end('{"a": [1, 2', 0) is None
    with pytest.raises(Malformed):
        value_end('{"a": ]', 0)
    with pytest.raises(Malformed):
        value_end("hello", 0)


def test_value_end_resumes_across_pieces():
    text = '[{"name": "f", "arguments": {"q": "a]b"}}] rest'
    scan = ValueEnd(0)
    for cut in range(1, len(text)):
        result = scan.scan(text[:cut])
        if result is not None:
            break
    assert result == text.index(" rest")


def test_raw_members_and_elements_keep_model_text():
    obj = '{"name": "f", "arguments": {"b": 1.50,  "a": 2}}'
    assert raw_members(obj) == {"name": '"f"', "arguments": '{"b": 1.50,  "a": 2}'}
    assert raw_elements('[ {"a":1} , 2 ]') == ['{"a":1}', "2"]
    assert raw_elements("[]") == [] and raw_members("{ }") == {}
    with pytest.raises(Malformed):
        raw_members('{"a": 1} extra')


def test_arguments_text():
    assert arguments_text('{"x": 1}') == '{"x": 1}'
    assert arguments_text(None) == "{}"
    assert arguments_text("null") == "{}"
    assert arguments_text('"{\\"x\\": 1}"') == '{"x": 1}'
    assert arguments_text("[1]") is None


def test_call_list():
    body = '[{"name": "a", "arguments": {"k": 1}}, {"name": "b"}, {"arguments": {}}]'
    assert call_list(body, "name", "arguments") == [("a", '{"k": 1}'), ("b", "{}")]
    assert call_list('{"name": "a", "arguments": {}}', "name", "arguments") == [("a", "{}")]
    assert call_list('[{"name": "a", "arguments": {"k": ', "name", "arguments") == []
