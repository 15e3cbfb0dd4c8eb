import json

from mlxcel.chat.tool_parsers.coercion import coerce_value as coerce_parameter
from mlxcel.chat.tool_parsers.coercion import schema_types
from mlxcel.chat.tool_parsers.qwen3_coder import Qwen3CoderParser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TOOLS, args, feed_pieces, tool

P = Qwen3CoderParser

WRITE = tool(
    "write_file",
    {
        "path": {"type": "string"},
        "content": {"type": "string"},
        "mode": {"type": ["integer", "null"]},
        "overwrite": {"type": "boolean"},
        "options": {"type": "object"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "ratio": {"type": "number"},
        "zip": {"type": "string"},
    },
)
ALL = TOOLS + [WRITE]


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def test_prose_then_one_call_with_coerced_values():
    text = "I'll check the forecast.\n\n" + call("get_weather", city="Paris", days="3")
    out = check_stream(P, text, ALL)
    assert out.content == "I'll check the forecast.\n\n"
    assert out.tool_calls[0].name == "get_weather"
    assert out.tool_calls[0].arguments == '{"city": "Paris", "days": 3}'


def test_two_calls_and_two_functions_in_one_block():
    text = call("get_weather", city="東京") + "\n" + call("search_web", query="ramen", limit="2")
    out = check_stream(P, text, ALL)
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert args(out.tool_calls[0]) == {"city": "東京"}
    assert out.tool_calls[0].arguments == '{"city": "東京"}'  # unicode kept as is
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n"
        "<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"
    )
    out = check_stream(P, text, ALL)
    assert [args(c)["city"] for c in out.tool_calls] == ["Rome", "Oslo"]


def test_values_follow_the_schema():
    code = 'def f(x):\n    if x < 3 and {"a": 1}:\n        return "<b>"\n'
    text = call(
        "write_file",
        path="src/a.py",
        content=code,
        mode="null",
        overwrite="True",
        options='{"indent": 4, "eol": "\\n"}',
        tags="['x', 'y']",
        ratio="0.5",
        zip="02134",
        extra="[1, 2]",
    )
    out = check_stream(P, text, ALL)
    assert args(out.tool_calls[0]) == {
        "path": "src/a.py",
        "content": code,
        "mode": None,
        "overwrite": True,
        "options": {"indent": 4, "eol": "\n"},
        "tags": ["x", "y"],
        "ratio": 0.5,
        "zip": "02134",
        "extra": [1, 2],
    }


def test_arguments_are_built_key_by_key():
    pieces = [
        "<tool_call>\n<function=get_weather>\n",
        "<parameter=city>\nPar",
        "is\n</parameter>\n<parameter=days>\n2\n</parameter>\n",
        "</function>\n</tool_call>",
    ]
    deltas = feed_pieces(P, pieces, ALL)
    assert deltas[0].tool_calls[0].name == "get_weather" and deltas[0].tool_calls[1].arguments == "{"
    assert not deltas[1].tool_calls
    assert deltas[2].tool_calls[0].arguments == '"city": "Paris", "days": 2'
    assert deltas[3].tool_calls[0].arguments == "}"
    whole = "".join(d.arguments for delta in deltas for d in delta.tool_calls)
    assert json.loads(whole) == {"city": "Paris", "days": 2}


def test_no_call_and_false_alarms():
    text = "Use <function> tags or <func= carefully; a <tool_ call is not one. x<y>z"
    out = check_stream(P, text, ALL)
    assert out.content == text and not out.tool_calls


def test_missing_closing_parameter_tags_and_no_parameters():
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nNice\n<parameter=days>\n4\n</function>\n</tool_call>"
    out = check_stream(P, text, ALL)
    assert args(out.tool_calls[0]) == {"city": "Nice", "days": 4}
    out = check_stream(P, "<tool_call>\n<function=search_web>\n</function>\n</tool_call>", ALL)
    assert out.tool_calls[0].arguments == "{}"


def test_function_without_outer_tag():
    text = "Calling now.\n<function=get_weather>\n<parameter=city>\nLima\n</parameter>\n</function>"
    out = check_stream(P, text, ALL)
    assert out.content == "Calling now.\n" and args(out.tool_calls[0]) == {"city": "Lima"}


def test_json_body_inside_tool_call():
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Quito"}}\n</tool_call>'
    assert check_stream(P, text, ALL).tool_calls[0].arguments == '{"city": "Quito"}'


def test_unfinished_call_at_end():
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2"
    out = check_stream(P, text, ALL)
    assert out.tool_calls[0].arguments == '{"city": "Paris"}'  # the unfinished value is left out
    text = "Hmm <tool_call>\n<function=get_wea"
    out = check_stream(P, text, ALL)
    assert out.content == text and not out.tool_calls


def test_coercion_helpers():
    assert schema_types({"anyOf": [{"type": "integer"}, {"type": "null"}]}) == {"integer", "null"}
    assert schema_types({"enum": ["a", "b"]}) == {"string"}
    assert coerce_parameter("42", {"type": "string"}) == "42"
    assert coerce_parameter("42", {"type": "integer"}) == 42
    assert coerce_parameter("4.5", {"type": "integer"}) == 4.5  # not its type, but still JSON
    assert coerce_parameter("about 4", {"type": "integer"}) == "about 4"  # nothing fits: text
    assert coerce_parameter("1e3", {"type": "number"}) == 1000.0
    assert coerce_parameter("nan", {"type": "number"}) == "nan"
    assert coerce_parameter("FALSE", {"type": "boolean"}) is False
    assert coerce_parameter("{'a': (1, 2)}", {"type": "object"}) == {"a": [1, 2]}
    assert coerce_parameter("hello", None) == "hello"
    assert coerce_parameter("7", {"type": ["string", "integer"]}) == 7


def test_matches_template():
    coder = (
        "{{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"
        "{{- '<parameter=' + args_name + '>\\n' }}{{- args_value }}{{- '\\n</parameter>\\n' }}"
        "{{- '</function>\\n</tool_call>' }}"
    )
    assert P.matches_template(coder)
    assert not P.matches_template('<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')
