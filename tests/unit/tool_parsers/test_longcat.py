"""LongCat-Flash: <longcat_tool_call>NAME<longcat_arg_key>K</longcat_arg_key>...</longcat_tool_call>."""

from __future__ import annotations

from mlxcel.chat.tool_parsers.longcat import LongCatParser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TYPED_TOOLS as TOOLS
from tests.unit.tool_parsers.tools import args

P = LongCatParser


def _call(name: str, **values: str) -> str:
    pairs = "".join(
        f"<longcat_arg_key>{k}</longcat_arg_key>\n<longcat_arg_value>{v}</longcat_arg_value>\n" for k, v in values.items()
    )
    return f"<longcat_tool_call>{name}\n{pairs}</longcat_tool_call>"


def test_prose_then_one_call():
    text = "好的，我来查一下天气。\n" + _call("get_weather", city="北京", days="2")
    out = check_stream(P, text, TOOLS)
    assert out.content == "好的，我来查一下天气。"
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.tool_calls[0].arguments == '{"city":"北京","days":2}'


def test_two_calls():
    text = _call("get_weather", city="Tianjin") + "\n" + _call("search_web", query="Tianjin food", limit="8")
    out = check_stream(P, text, TOOLS)
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert args(out.tool_calls[1]) == {"query": "Tianjin food", "limit": 8}


def test_no_call_and_false_alarm():
    text = "The prefix <longcat_ or <longcat_tool is not a call; <longcat_arg_key> alone is text."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_nested_values_and_coercion():
    text = _call(
        "get_weather",
        city="Shenzhen",
        detailed="false",
        threshold="-0.5",
        filters="{'min_temp': 20, 'label': 'hot'}",
        tags='["sun"]',
        note="null",
    )
    out = check_stream(P, text, TOOLS)
    assert args(out.tool_calls[0]) == {
        "city": "Shenzhen",
        "detailed": False,
        "threshold": -0.5,
        "filters": {"min_temp": 20, "label": "hot"},
        "tags": ["sun"],
        "note": None,
    }


def test_json_body_variant_keeps_model_text():
    text = '<longcat_tool_call>{"name": "search_web", "arguments": {"query": "猫", "limit": 1}}</longcat_tool_call>'
    out = check_stream(P, text, TOOLS)
    assert out.tool_calls[0].arguments == '{"query": "猫", "limit": 1}'


def test_unfinished_call_is_dropped():
    out = check_stream(P, "稍等。<longcat_tool_call>get_weather\n<longcat_arg_key>city</longcat_arg_key>\n<longcat_arg_value>Xi", TOOLS)
    assert out.content == "稍等。" and out.tool_calls == []


def test_matches_template():
    template = (
        "{{- '<longcat_tool_call>' + tool_call.function.name + '\\n' -}}"
        "{%- for k, v in args.items() -%}{{- '<longcat_arg_key>' + k + '</longcat_arg_key>\\n' -}}{%- endfor -%}"
    )
    assert P.matches_template(template)
    assert not P.matches_template("<tool_call>{{ name }}<arg_key>k</arg_key></tool_call>")
