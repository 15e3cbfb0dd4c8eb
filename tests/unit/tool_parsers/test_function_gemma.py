"""Function-calling Gemma: <start_function_call>call:NAME{...}<end_function_call>, <escape> quotes."""

from __future__ import annotations

from mlxcel.chat.tool_parsers.function_gemma import FunctionGemmaParser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TYPED_TOOLS as TOOLS
from tests.unit.tool_parsers.tools import args

P = FunctionGemmaParser
E = "<escape>"


def test_one_call():
    text = f"<start_function_call>call:get_weather{{city:{E}London{E},days:2}}<end_function_call>"
    out = check_stream(P, text, TOOLS)
    assert out.content == ""
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.tool_calls[0].arguments == '{"city":"London","days":2}'


def test_prose_and_two_calls():
    text = (
        "Sure, checking both.\n"
        f"<start_function_call>call:get_weather{{city:{E}Lisboa{E}}}<end_function_call>"
        f"<start_function_call>call:search_web{{query:{E}fado, tonight{E},limit:3}}<end_function_call>"
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == "Sure, checking both."
    assert [args(c) for c in out.tool_calls] == [{"city": "Lisboa"}, {"query": "fado, tonight", "limit": 3}]


def test_plain_text_and_false_alarm():
    text = "The tag <start_function is cut, <end_function_call> alone is text, and <escape> too."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_nested_unicode_coercion():
    body = (
        f"city:{E}Αθήνα{E},detailed:false,threshold:12.5,"
        f"filters:{{min_temp:10,label:{E}ζέστη{E}}},tags:[{E}ήλιος{E}],note:{E}a {{brace}} ]{E}"
    )
    text = f"<start_function_call>call:get_weather{{{body}}}<end_function_call>"
    out = check_stream(P, text, TOOLS)
    assert args(out.tool_calls[0]) == {
        "city": "Αθήνα",
        "detailed": False,
        "threshold": 12.5,
        "filters": {"min_temp": 10, "label": "ζέστη"},
        "tags": ["ήλιος"],
        "note": "a {brace} ]",
    }


def test_self_written_response_is_dropped_and_unfinished_call():
    text = (
        f"<start_function_call>call:get_weather{{city:{E}Rome{E}}}<end_function_call>"
        "<start_function_response>response:get_weather{temp:21}<end_function_response>"
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == "" and len(out.tool_calls) == 1
    out = check_stream(P, f"Wait.<start_function_call>call:get_weather{{city:{E}Ro", TOOLS)
    assert out.content == "Wait." and out.tool_calls == []


def test_matches_template():
    template = (
        "{%- for call in message.tool_calls -%}<start_function_call>call:{{ call.function.name }}{"
        "{%- for k, v in call.function.arguments.items() -%}{{ k }}:<escape>{{ v }}<escape>{%- endfor -%}"
        "}<end_function_call>{%- endfor -%}"
    )
    assert P.matches_template(template)
    assert not P.matches_template("<|tool_call>call:{{ name }}{}<tool_call|>")
