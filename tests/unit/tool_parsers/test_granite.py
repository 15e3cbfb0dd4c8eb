"""Granite 3.x: <|tool_call|>[...] and the <response><tool_call>[...]</tool_call></response> form."""

from __future__ import annotations

from mlxcel.chat.tool_parsers.granite import GraniteParser
from tests.unit.tool_parser_harness import check_stream, stream
from tests.unit.tool_parsers.tools import TYPED_TOOLS as TOOLS
from tests.unit.tool_parsers.tools import args

P = GraniteParser


def test_one_call():
    text = '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Boston", "days": 1}}]'
    out = check_stream(P, text, TOOLS)
    assert out.content == ""
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.tool_calls[0].arguments == '{"city": "Boston", "days": 1}'


def test_prose_then_two_calls():
    text = (
        "I'll check both for you.\n"
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Boston"}}, '
        '{"name": "search_web", "arguments": {"query": "Boston  events", "limit": 10}}]'
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == "I'll check both for you."
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert out.tool_calls[1].arguments == '{"query": "Boston  events", "limit": 10}'


def test_think_and_response_wrapped_call():
    text = (
        "<think>The user wants the weather; I should call the tool.</think>\n"
        '<response><tool_call>[{"name": "get_weather", "arguments": {"city": "Zürich", '
        '"filters": {"min_temp": -1, "label": "kühl"}}}]</tool_call></response>'
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == ""
    assert args(out.tool_calls[0]) == {"city": "Zürich", "filters": {"min_temp": -1, "label": "kühl"}}
    delta = stream(P, list(text), TOOLS)
    assert delta.reasoning == "The user wants the weather; I should call the tool."


def test_response_only():
    text = "<think>Simple greeting.</think><response>Hello! 👋 How can I help?</response>"
    out = check_stream(P, text, TOOLS)
    assert out.content == "Hello! 👋 How can I help?" and out.tool_calls == []


def test_plain_reply_and_false_alarms():
    text = "Use <|tool to start; <tool_ is not a tag; <respond> either; x < y."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_text_after_the_list():
    text = 'Checking.<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Oslo"}}]\nDone.'
    out = check_stream(P, text, TOOLS)
    assert out.content == "Checking.\nDone."
    assert len(out.tool_calls) == 1


def test_single_object_and_string_arguments():
    text = '<|tool_call|>{"name": "search_web", "arguments": "{\\"query\\": \\"tea\\"}"}'
    out = check_stream(P, text, TOOLS)
    assert out.tool_calls[0].arguments == '{"query": "tea"}'


def test_unfinished_list_is_dropped():
    out = check_stream(P, 'One sec.<|tool_call|>[{"name": "get_weather", "arguments": {"ci', TOOLS)
    assert out.content == "One sec." and out.tool_calls == []


def test_marker_without_json_stands_alone():
    out = check_stream(P, "<|tool_call|>I cannot call tools for that.", TOOLS)
    assert out.content == "I cannot call tools for that." and out.tool_calls == []


def test_matches_template():
    template = (
        "{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' }}"
        "{%- if message['role'] == 'assistant' and message.tool_calls %}{{- '<|tool_call|>[' }}"
    )
    assert P.matches_template(template)
    assert P.matches_template("{{- '<response><tool_call>' + calls | tojson + '</tool_call></response>' }}")
    hermes = "<|im_start|>assistant\n<tool_call>\n{{ tool_call | tojson }}\n</tool_call>"
    assert not P.matches_template(hermes)
    granite4 = "<|start_of_role|>assistant<|end_of_role|><tool_call>\n{{ tc | tojson }}\n</tool_call>"
    assert not P.matches_template(granite4)
