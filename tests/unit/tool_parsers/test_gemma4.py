"""Gemma 4: <|tool_call>call:NAME{k:v}<tool_call|> with <|"|> string quotes."""

from __future__ import annotations

from mlxcel.chat.tool_parsers.gemma4 import Gemma4Parser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TYPED_TOOLS as TOOLS
from tests.unit.tool_parsers.tools import args

P = Gemma4Parser
Q = '<|"|>'


def test_prose_then_one_call():
    text = f"Let me check the weather in Paris.<|tool_call>call:get_weather{{city:{Q}Paris{Q},days:3}}<tool_call|>"
    out = check_stream(P, text, TOOLS)
    assert out.content == "Let me check the weather in Paris."
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.tool_calls[0].arguments == '{"city":"Paris","days":3}'


def test_two_calls():
    text = (
        f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q}}}<tool_call|>"
        f"<|tool_call>call:search_web{{query:{Q}Oslo, Norway{Q},limit:5}}<tool_call|>"
    )
    out = check_stream(P, text, TOOLS)
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert args(out.tool_calls[1]) == {"query": "Oslo, Norway", "limit": 5}


def test_no_call_and_false_alarm():
    text = "Gemma writes <|tool and <tool_call| sometimes in docs; call:get_weather{city:Paris} is plain text."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_nested_values_unicode_and_coercion():
    body = (
        f"city:{Q}Kraków {{stare miasto}}, ☔{Q},"
        "days:2,detailed:true,threshold:0.75,note:null,"
        f"filters:{{min_temp:-3,label:{Q}zimno{Q}}},"
        f"tags:[{Q}deszcz{Q},{Q}wiatr{Q}],"
        f"units:{Q}celsius{Q}"
    )
    text = f"Sprawdzam…\n<|tool_call>call:get_weather{{{body}}}<tool_call|>\nChwileczkę."
    out = check_stream(P, text, TOOLS)
    assert out.content == "Sprawdzam…\nChwileczkę."
    assert args(out.tool_calls[0]) == {
        "city": "Kraków {stare miasto}, ☔",
        "days": 2,
        "detailed": True,
        "threshold": 0.75,
        "note": None,
        "filters": {"min_temp": -3, "label": "zimno"},
        "tags": ["deszcz", "wiatr"],
        "units": "celsius",
    }


def test_schema_guides_bare_and_quoted_values():
    # a bare word for a string parameter stays text; a quoted number for an integer is read
    text = f"<|tool_call>call:get_weather{{city:Lyon,days:{Q}4{Q}}}<tool_call|>"
    out = check_stream(P, text, TOOLS)
    assert args(out.tool_calls[0]) == {"city": "Lyon", "days": 4}


def test_closing_marker_inside_a_string_does_not_end_the_call():
    text = f"<|tool_call>call:search_web{{query:{Q}what is <tool_call|> in gemma?{Q}}}<tool_call|>"
    out = check_stream(P, text, TOOLS)
    assert args(out.tool_calls[0]) == {"query": "what is <tool_call|> in gemma?"}


def test_empty_arguments_and_dotted_names():
    out = check_stream(P, "<|tool_call>call:tools.ping{}<tool_call|>", TOOLS)
    assert out.tool_calls[0].name == "tools.ping" and out.tool_calls[0].arguments == "{}"


def test_self_written_tool_response_is_dropped():
    text = f"<|tool_call>call:get_weather{{city:{Q}Rome{Q}}}<tool_call|><|tool_response>response:get_weather{{temp:20}}<tool_response|>"
    out = check_stream(P, text, TOOLS)
    assert out.content == "" and len(out.tool_calls) == 1


def test_unfinished_and_malformed_calls():
    out = check_stream(P, f"Ok.<|tool_call>call:get_weather{{city:{Q}Ro", TOOLS)
    assert out.content == "Ok." and out.tool_calls == []
    out = check_stream(P, f"<|tool_call>call:get_weather{{city:{Q}Rome{Q}}}", TOOLS)
    assert [c.name for c in out.tool_calls] == ["get_weather"]  # only the end marker is missing
    out = check_stream(P, "<|tool_call>get_weather(city='Rome')<tool_call|>", TOOLS)
    assert out.tool_calls == [] and out.content == ""


def test_matches_template():
    template = (
        "{%- for tool_call in message['tool_calls'] -%}"
        "{{- '<|tool_call>call:' + tool_call['function']['name'] + '{' -}}"
        "{{- format_argument(tool_call['function']['arguments'], escape_keys=False) -}}{{- '}<tool_call|>' -}}"
        "{%- endfor -%}{{ '<|\"|>' }}"
    )
    assert P.matches_template(template)
    assert not P.matches_template("<start_function_call>call:{{ name }}{...}<end_function_call>")
