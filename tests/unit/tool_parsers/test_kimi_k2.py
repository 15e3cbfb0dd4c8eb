from mlxcel.chat.tool_parsers.kimi_k2 import KimiK2Parser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TOOLS, args

P = KimiK2Parser
B, E = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"


def call(index: int, name: str, arguments: str) -> str:
    return f"<|tool_call_begin|>functions.{name}:{index}<|tool_call_argument_begin|>{arguments}<|tool_call_end|>"


def test_prose_then_one_call():
    text = "I'll check the weather." + B + call(0, "get_weather", '{"city": "Paris"}') + E
    out = check_stream(P, text, TOOLS)
    assert out.content == "I'll check the weather."
    assert out.tool_calls[0].name == "get_weather" and out.tool_calls[0].arguments == '{"city": "Paris"}'


def test_two_calls_unicode_nested():
    text = B + "\n" + call(0, "get_weather", '{"city":"北京"}') + "\n" + call(
        1, "search_web", '{"query": "a}{b", "opts": {"k": [1, {"x": null}]}}'
    ) + "\n" + E
    out = check_stream(P, text, TOOLS)
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert out.tool_calls[0].arguments == '{"city":"北京"}'
    assert args(out.tool_calls[1])["opts"] == {"k": [1, {"x": None}]}


def test_no_call_and_false_alarm():
    text = "Plain answer with <|tool_calls and <|tool_call_beg but no markup."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls


def test_bad_section_is_released_and_truncated_call_kept():
    text = B + call(0, "get_weather", "{not json") + E
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls
    text = "Ok" + B + "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Rome\"}"
    out = check_stream(P, text, TOOLS)
    assert out.content == "Ok" and args(out.tool_calls[0]) == {"city": "Rome"}


def test_matches_template():
    assert P.matches_template("{{- '<|tool_calls_section_begin|>' -}}{%- for tool_call in message['tool_calls'] -%}")
    assert not P.matches_template("<tool_call>")
