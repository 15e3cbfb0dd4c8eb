"""OpenAI's legacy function calling, translated at the chat edge (legacy_functions.py)."""

from __future__ import annotations

import pytest

from mlxcel.api.openai.legacy_functions import (
    finish_reason,
    function_call_delta,
    function_call_message,
    legacy_messages,
    legacy_tools,
)
from mlxcel.turn.errors import InvalidRequest

WEATHER = {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def test_functions_become_tools_and_function_call_the_tool_choice():
    assert legacy_tools(None, None, [{"type": "function"}], "auto") is None  # not a legacy request
    tools, choice = legacy_tools([WEATHER], None, None, None)
    assert tools == [{"type": "function", "function": WEATHER}] and choice is None
    assert legacy_tools([WEATHER], "auto", [], None)[1] == "auto"
    assert legacy_tools([WEATHER], "none", None, None)[1] == "none"
    assert legacy_tools([WEATHER], {"name": "get_weather"}, None, None)[1] == {
        "type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize("functions, function_call, tools, tool_choice, needle", [
    (None, "auto", None, None, "needs 'functions'"),
    ([WEATHER], None, [{"type": "function", "function": WEATHER}], None, "together"),
    ([WEATHER], None, None, "required", "tool_choice"),
    ([WEATHER], "required", None, None, "'none', 'auto'"),
    ([WEATHER], {"name": ""}, None, None, "'none', 'auto'"),
    ([WEATHER], {"name": 3}, None, None, "'none', 'auto'"),
    ([WEATHER], 7, None, None, "'none', 'auto'"),
])
def test_mixed_or_malformed_legacy_fields_are_refused(functions, function_call, tools, tool_choice, needle):
    with pytest.raises(InvalidRequest, match=needle):
        legacy_tools(functions, function_call, tools, tool_choice)


def test_history_calls_and_results_become_tool_calls_and_tool_messages():
    messages = [
        {"role": "user", "content": "Weather in Paris, then Rome?"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"role": "function", "name": "get_weather", "content": "sunny"},
        {"role": "assistant", "function_call": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
        {"role": "function", "name": "get_weather", "content": "rain"},
    ]
    out = legacy_messages(messages)
    assert out[0] is messages[0]
    first, second = out[1]["tool_calls"][0], out[3]["tool_calls"][0]
    assert "function_call" not in out[1] and first["function"] == messages[1]["function_call"]
    assert first["id"] != second["id"]
    assert out[2] == {"role": "tool", "name": "get_weather", "content": "sunny", "tool_call_id": first["id"]}
    assert out[4]["tool_call_id"] == second["id"]  # a result answers the latest call of its function
    assert messages[1]["function_call"]  # the request's own messages are left as they were


@pytest.mark.parametrize("message, needle", [
    ({"role": "assistant", "function_call": {"arguments": "{}"}}, "name"),
    ({"role": "assistant", "function_call": {"name": "f", "arguments": {"a": 1}}}, "string"),
    ({"role": "function", "content": "x"}, "name"),
])
def test_malformed_history_is_refused(message, needle):
    with pytest.raises(InvalidRequest, match=needle):
        legacy_messages([{"role": "user", "content": "hi"}, message])


def test_the_reply_comes_back_in_the_legacy_shape():
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
    assert function_call_message(message) == {"role": "assistant", "content": "", "function_call": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}
    assert function_call_message({"role": "assistant", "content": "hi"}) == {"role": "assistant", "content": "hi"}
    start = {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": ""}}]}
    assert function_call_delta(start) == {"function_call": {"name": "get_weather", "arguments": ""}}
    both = {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": "get_weather", "arguments": ""}},
                           {"index": 0, "function": {"arguments": '{"'}}]}
    assert function_call_delta(both) == {"function_call": {"name": "get_weather", "arguments": '{"'}}
    piece = {"content": "x", "tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}
    assert function_call_delta(piece) == {"content": "x", "function_call": {"arguments": '{"ci'}}
    assert finish_reason("tool_calls") == "function_call" and finish_reason("length") == "length"
