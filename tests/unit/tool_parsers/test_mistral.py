from mlxcel.chat.tool_parsers.mistral import MistralParser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TOOLS, args, feed_pieces

P = MistralParser


def test_prose_then_one_bracketed_call():
    text = 'Let me check that for you.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}'
    out = check_stream(P, text, TOOLS)
    assert out.content == "Let me check that for you."
    assert out.tool_calls[0].name == "get_weather"
    assert out.tool_calls[0].arguments == '{"city": "Paris", "days": 2}'


def test_two_calls_with_and_without_call_ids():
    text = (
        '[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city":"Zürich"}'
        '[TOOL_CALLS]search_web[ARGS]{"query": "fondue {recipe} [best]", "limit": 3}'
    )
    out = check_stream(P, text, TOOLS)
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert out.tool_calls[0].arguments == '{"city":"Zürich"}'
    assert args(out.tool_calls[1]) == {"query": "fondue {recipe} [best]", "limit": 3}


def test_name_directly_followed_by_json():
    out = check_stream(P, '[TOOL_CALLS]get_weather{"city": "Lyon"}', TOOLS)
    assert out.tool_calls[0].arguments == '{"city": "Lyon"}'


def test_list_form_is_read_too():
    text = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}]'
    assert check_stream(P, text, TOOLS).tool_calls[0].arguments == '{"city": "Oslo"}'


def test_arguments_stream():
    deltas = feed_pieces(P, ["[TOOL_CALLS]get_weather[AR", 'GS]{"city": ', '"Paris"}'])
    assert not deltas[0].tool_calls
    assert deltas[1].tool_calls[0].name == "get_weather" and deltas[1].tool_calls[1].arguments == '{"city": '
    assert deltas[2].tool_calls[0].arguments == '"Paris"}'


def test_no_call_and_false_alarms():
    text = "Brackets like [TOOLS] or [TOOL_CALL] and [ARGS] are plain text here."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls


def test_malformed_and_unfinished():
    text = "[TOOL_CALLS]I cannot call a tool for this."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls
    out = check_stream(P, "[TOOL_CALLS]get_weather[ARGS]", TOOLS)
    assert out.content == "[TOOL_CALLS]get_weather[ARGS]" and not out.tool_calls
    out = check_stream(P, '[TOOL_CALLS]get_weather[ARGS]{"city": "Par', TOOLS)
    assert out.tool_calls[0].arguments == '{"city": "Par'


def test_matches_template():
    small3 = (
        "{%- elif message.tool_calls %}{%- for tool in message.tool_calls %}"
        "{{- '[TOOL_CALLS]' + tool.function.name + '[ARGS]' + tool.function.arguments | tojson }}"
    )
    assert P.matches_template(small3)
    assert not P.matches_template("{{- '[TOOL_CALLS][' }}{%- for tool_call in message.tool_calls %}")


def test_bare_marker_at_end_is_released():
    for text in ["[TOOL_CALLS]", "[TOOL_CALLS]  ", "Done.[TOOL_CALLS]["]:
        out = check_stream(P, text, TOOLS)
        assert out.content == text and not out.tool_calls
