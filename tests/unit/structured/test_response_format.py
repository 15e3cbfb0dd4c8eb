from __future__ import annotations

import pytest

from mlxcel.structured import ResponseFormat, ResponseFormatError

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize("value", [None, {"type": "text"}, {}])
def test_text_or_absent_is_unconstrained(value):
    fmt = ResponseFormat.parse(value)
    assert not fmt.constrained
    assert fmt.grammar_spec() is None


def test_json_object_is_any_object():
    fmt = ResponseFormat.parse({"type": "json_object"})
    spec = fmt.grammar_spec()
    assert fmt.constrained and spec is not None and spec.kind == "json_object"


def test_json_schema_chat_shape():
    fmt = ResponseFormat.parse(
        {"type": "json_schema", "json_schema": {"name": "City", "strict": True, "schema": SCHEMA}}
    )
    assert (fmt.type, fmt.name, fmt.strict, fmt.schema) == ("json_schema", "City", True, SCHEMA)
    spec = fmt.grammar_spec()
    assert spec is not None and spec.kind == "json_schema" and spec.name == "City"


def test_json_schema_flattened_shape():
    """Responses `text.format` and Anthropic `output_config` put the schema at the top."""
    fmt = ResponseFormat.parse({"type": "json_schema", "name": "City", "schema": SCHEMA})
    assert fmt.schema == SCHEMA and fmt.name == "City"


@pytest.mark.parametrize(
    "value, words",
    [
        ({"type": "yaml"}, "response_format.type"),
        ({"type": "json_schema", "json_schema": {"schema": "{}"}}, "must be an object"),
        ({"type": "json_schema", "json_schema": []}, "must be an object"),
        ({"type": "json_schema", "json_schema": {"schema": SCHEMA, "strict": "yes"}}, "strict"),
        ({"type": "json_schema", "json_schema": {"schema": SCHEMA, "name": 3}}, "name"),
        ("json", "must be an object"),
    ],
)
def test_malformed_formats_are_rejected(value, words):
    with pytest.raises(ResponseFormatError) as info:
        ResponseFormat.parse(value)
    assert words in str(info.value)
