"""GLM-4.x: <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>."""

from __future__ import annotations

from mlxcel.chat.tool_parsers.glm47 import Glm47Parser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TYPED_TOOLS as TOOLS
from tests.unit.tool_parsers.tools import args

P = Glm47Parser


def _call(name: str, **values: str) -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in values.items())
    return f"<tool_call>{name}{pairs}</tool_call>"


def test_prose_then_one_call():
    text = "I'll check the weather in Beijing.\n" + _call("get_weather", city="Beijing", days="3")
    out = check_stream(P, text, TOOLS)
    assert out.content == "I'll check the weather in Beijing."
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.tool_calls[0].arguments == '{"city":"Beijing","days":3}'


def test_two_calls_glm45_newline_layout():
    text = (
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Shanghai</arg_value>\n</tool_call>\n"
        "<tool_call>search_web\n<arg_key>query</arg_key>\n<arg_value>上海 天气</arg_value>\n"
        "<arg_key>limit</arg_key>\n<arg_value>4</arg_value>\n</tool_call>"
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == ""
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert args(out.tool_calls[1]) == {"query": "上海 天气", "limit": 4}


def test_no_call_and_false_alarm():
    text = "Use <tool_ tags carefully; <tool_call is incomplete and <arg_key> means nothing here."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_coercion_of_each_type():
    text = _call(
        "get_weather",
        city="  Hangzhou \n",
        days="7",
        units="celsius",
        detailed="True",
        threshold="2.5",
        note="None",
        filters='{"min_temp": 5, "label": "温暖"}',
        tags='["雨", "风"]',
    )
    out = check_stream(P, text, TOOLS)
    assert args(out.tool_calls[0]) == {
        "city": "  Hangzhou \n",  # string parameters keep their text exactly
        "days": 7,
        "units": "celsius",
        "detailed": True,
        "threshold": 2.5,
        "note": None,
        "filters": {"min_temp": 5, "label": "温暖"},
        "tags": ["雨", "风"],
    }


def test_no_arguments_and_text_after():
    out = check_stream(P, "Let me see.<tool_call>get_time</tool_call>\nOne moment.", TOOLS)
    assert out.content == "Let me see.\nOne moment."
    assert out.tool_calls[0].name == "get_time" and out.tool_calls[0].arguments == "{}"


def test_unfinished_calls():
    out = check_stream(P, "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Wuhan</arg_value>", TOOLS)
    assert args(out.tool_calls[0]) == {"city": "Wuhan"}  # every pair complete: only the end is missing
    out = check_stream(P, "Hm.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Wu", TOOLS)
    assert out.content == "Hm." and out.tool_calls == []


def test_matches_template():
    glm = (
        "{%- for tc in m.tool_calls -%}\n<tool_call>{{ tc.function.name }}\n"
        "{%- for k, v in tc.function.arguments.items() -%}\n<arg_key>{{ k }}</arg_key>\n"
        "<arg_value>{{ v | tojson(ensure_ascii=False) if v is not string else v }}</arg_value>\n"
        "{%- endfor -%}\n</tool_call>{%- endfor -%}"
    )
    assert P.matches_template(glm)
    hermes = '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    assert not P.matches_template(hermes)
