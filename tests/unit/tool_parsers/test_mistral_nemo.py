from mlxcel.chat.tool_parsers.mistral_nemo import MistralNemoParser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TOOLS, args, feed_pieces

P = MistralNemoParser


def test_one_call():
    text = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}, "id": "a1B2c3D4e"}]'
    out = check_stream(P, text, TOOLS)
    assert out.content == "" and out.tool_calls[0].name == "get_weather"
    assert out.tool_calls[0].arguments == '{"city": "Paris", "days": 2}'


def test_prose_then_two_calls_with_unicode_and_braces():
    text = (
        "Je vérifie.[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Montréal\"}},"
        ' {"name": "search_web", "arguments": {"query": "\\"}{\\" café", "limit":10}}]'
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == "Je vérifie."
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert args(out.tool_calls[1]) == {"query": '"}{" café', "limit": 10}
    assert out.tool_calls[1].arguments == '{"query": "\\"}{\\" café", "limit":10}'


def test_single_object_without_list():
    out = check_stream(P, '[TOOL_CALLS]{"name": "search_web", "arguments": {"query": "x"}}', TOOLS)
    assert out.tool_calls[0].arguments == '{"query": "x"}'


def test_streams_each_call():
    deltas = feed_pieces(P, ['[TOOL_CALLS][{"name": "get_weather", "arguments": {"ci', 'ty": "Rome"}}, {"name"', ': "search_web", "arguments": {}}]'])
    assert deltas[0].tool_calls[0].name == "get_weather"
    assert deltas[1].tool_calls[0].arguments == 'ty": "Rome"}'
    assert deltas[2].tool_calls[0].name == "search_web"


def test_no_call_false_alarm_and_bad_items():
    text = "A list: [TOOL] [1, 2] and [TOOL_CALLS is unfinished"
    out = check_stream(P, text, TOOLS)
    assert out.content == text
    text = '[TOOL_CALLS][{"tool": "get_weather"}]'
    out = check_stream(P, text, TOOLS)
    assert not out.tool_calls and out.content == text
    out = check_stream(P, '[TOOL_CALLS][{"name": "get_weather", "arg', TOOLS)
    assert out.content == '[TOOL_CALLS][{"name": "get_weather", "arg' and not out.tool_calls


def test_matches_template_and_grammar():
    nemo = "{{- '[TOOL_CALLS][' }}{%- for tool_call in message.tool_calls %}{{- '{\"name\": \"' }}"
    assert P.matches_template(nemo)
    assert not P.matches_template("{{- '[TOOL_CALLS]' + name + '[ARGS]' }}")
    grammar = P(TOOLS).call_grammar(TOOLS[1:])
    assert grammar["prefix"] == "[TOOL_CALLS][" and grammar["suffix"] == "]"
    assert grammar["schema"]["properties"]["name"] == {"const": "search_web"}
