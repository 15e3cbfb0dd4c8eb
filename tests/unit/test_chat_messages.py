"""Chat messages normalised for templates: tool-call arguments in an assistant history."""

from __future__ import annotations

import pytest

from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.messages import normalise_messages


def _history(arguments) -> list[dict]:
    return [{"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]}]


def _arguments(arguments):
    return normalise_messages(_history(arguments))[1]["tool_calls"][0]["function"]["arguments"]


def test_json_arguments_become_an_object_and_other_text_stays_text():
    assert _arguments('{"city": "Paris"}') == {"city": "Paris"}
    assert _arguments("") == {}
    assert _arguments("{not json") == "{not json"
    # an integer past Python's 4300-digit limit is text that is not JSON here, not a 500
    huge = '{"n": 1' + "0" * 5000 + "}"
    assert _arguments(huge) == huge


def test_arguments_nested_too_deeply_are_a_400():
    where = r"messages\[1\]\.tool_calls\[0\]\.function\.arguments"
    with pytest.raises(ChatInputError, match=where + ": the JSON is nested too deeply"):
        _arguments("[" * 5000 + "]" * 5000)
