"""MiniMax M3: namespaced XML, every tag behind the ]<]minimax[>[ token."""

from __future__ import annotations

from mlxcel.chat.tool_parsers.minimax_m3 import NS, MiniMaxM3Parser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TYPED_TOOLS as TOOLS
from tests.unit.tool_parsers.tools import args

P = MiniMaxM3Parser


def _invoke(name: str, body: str) -> str:
    return f'{NS}<invoke name="{name}">{body}{NS}</invoke>\n'


def _param(key: str, value: str) -> str:
    return f"{NS}<{key}>{value}{NS}</{key}>"


def _block(*invokes: str) -> str:
    return f"{NS}<tool_call>\n" + "".join(invokes) + f"{NS}</tool_call>"


def test_prose_then_one_call():
    text = "Let me check the forecast.\n" + _block(_invoke("get_weather", _param("city", "Paris") + _param("days", "3")))
    out = check_stream(P, text, TOOLS)
    assert out.content == "Let me check the forecast."
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.tool_calls[0].arguments == '{"city":"Paris","days":3}'


def test_two_invokes():
    text = _block(
        _invoke("get_weather", _param("city", "Oslo")),
        _invoke("search_web", _param("query", "Oslo opera") + _param("limit", "2")),
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == ""
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert args(out.tool_calls[1]) == {"query": "Oslo opera", "limit": 2}


def test_no_call_and_false_alarm_tokens():
    text = "Arrays look like a[0]; the token ]<]mini is not complete, nor is ]<]minimax[>[<b>."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_nested_objects_arrays_and_coercion():
    filters = f"\n{NS}<min_temp>-2{NS}</min_temp>\n{NS}<label>frío ❄{NS}</label>\n"
    tags = f"{NS}<item>snow{NS}</item>{NS}<item>42{NS}</item>"
    body = (
        _param("city", "São Paulo")
        + _param("days", "5")
        + _param("detailed", "false")
        + _param("threshold", "1.25")
        + _param("note", "null")
        + f"{NS}<filters>{filters}{NS}</filters>"
        + f"{NS}<tags>{tags}{NS}</tags>"
    )
    text = "Verificando…\n" + _block(_invoke("get_weather", body))
    out = check_stream(P, text, TOOLS)
    assert out.content == "Verificando…"
    assert args(out.tool_calls[0]) == {
        "city": "São Paulo",
        "days": 5,
        "detailed": False,
        "threshold": 1.25,
        "note": None,
        "filters": {"min_temp": -2, "label": "frío ❄"},
        "tags": ["snow", "42"],  # items typed string keep their text
    }


def test_items_without_schema_become_a_list_and_repeated_tags_collect():
    body = f"{NS}<ids>{NS}<item>1{NS}</item>{NS}<item>2{NS}</item>{NS}</ids>" + _param("x", "a") + _param("x", "b")
    out = check_stream(P, _block(_invoke("anything", body)), TOOLS)
    assert args(out.tool_calls[0]) == {"ids": [1, 2], "x": ["a", "b"]}


def test_string_value_keeps_raw_text():
    code = "if a < b:\n    print('<ok>')\n"
    out = check_stream(P, _block(_invoke("search_web", _param("query", code))), TOOLS)
    assert args(out.tool_calls[0]) == {"query": code}


def test_closing_tag_written_without_token_and_attribute_form():
    body = f"{NS}<query>字节 AI 新闻</query>" + f'{NS}<parameter name="limit">6{NS}</parameter>'
    out = check_stream(P, "我再查几条。" + _block(_invoke("search_web", body)), TOOLS)
    assert out.content == "我再查几条。"
    assert args(out.tool_calls[0]) == {"query": "字节 AI 新闻", "limit": 6}


def test_unfinished_block_keeps_complete_invokes():
    text = "Ok." + f"{NS}<tool_call>\n" + _invoke("get_weather", _param("city", "Rome")) + f'{NS}<invoke name="search_web">{NS}<query>Rom'
    out = check_stream(P, text, TOOLS)
    assert out.content == "Ok."
    assert [c.name for c in out.tool_calls] == ["get_weather"]


def test_matches_template():
    template = (
        "{%- set ns_token = ']<]minimax[>[' -%}\n"
        "{{- ns_token ~ '<tool_call>\\n' -}}{%- for tc in message.tool_calls -%}"
        "{{- ns_token ~ '<invoke name=\"' ~ tc.function.name ~ '\">' -}}{{ to_xml(tc.function.arguments) }}"
        "{{- ns_token ~ '</invoke>\\n' -}}{%- endfor -%}{{- ns_token ~ '</tool_call>' -}}"
    )
    assert P.matches_template(template)
    assert not P.matches_template('<minimax:tool_call>\n<invoke name="{{ name }}">')
