from mlxcel.chat.tool_parsers.generic_json import GenericJsonParser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TOOLS, feed_pieces

P = GenericJsonParser


def test_single_call_object():
    text = '{"name": "get_weather", "arguments": {"city": "Paris",  "days": 2}}'
    out = check_stream(P, text, TOOLS)
    assert out.content == "" and out.tool_calls[0].name == "get_weather"
    assert out.tool_calls[0].arguments == '{"city": "Paris",  "days": 2}'


def test_tool_calls_list_in_a_fence():
    text = (
        '```json\n{"tool_calls": [{"name": "get_weather", "arguments": {"city": "東京"}, "id": "1"},\n'
        '  {"name": "search_web", "arguments": {"query": "}{ tricky"}}]}\n```'
    )
    out = check_stream(P, text, TOOLS)
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert out.tool_calls[0].arguments == '{"city": "東京"}'
    assert out.tool_calls[1].arguments == '{"query": "}{ tricky"}'


def test_response_object_is_content():
    out = check_stream(P, '{"response": "It is sunny in Paris."}', TOOLS)
    assert out.content == "It is sunny in Paris." and not out.tool_calls


def test_prose_streams_and_is_content():
    text = "It is sunny in Paris today {mostly}."
    deltas = feed_pieces(P, [text[:5], text[5:]])
    assert deltas[0].content == text[:5] and deltas[1].content == text[5:]
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls


def test_not_calls_stay_content():
    for text in [
        '{"name": "delete_everything", "arguments": {}}',
        '{"tool_calls": [{"name": "get_weather", "arguments": {}}, {"name": "nope"}]}',
        '{"name": "get_weather", "arguments": {"city": "Par',
        "```python\nprint(1)\n```",
        "{not json}",
    ]:
        out = check_stream(P, text, TOOLS)
        assert out.content == text and not out.tool_calls
    out = check_stream(P, '{"name": "get_weather", "arguments": {}}', None)
    assert not out.tool_calls


def test_never_sniffed():
    assert not P.matches_template("{{ tools | tojson }}")
    assert not P.streams_arguments
