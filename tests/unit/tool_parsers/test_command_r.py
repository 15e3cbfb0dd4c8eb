"""Command R7B sections, and the Command R `Action:` text forms."""

from __future__ import annotations

from mlxcel.chat.tool_parsers.command_r import CommandRParser
from tests.unit.tool_parser_harness import check_stream, stream
from tests.unit.tool_parsers.tools import TYPED_TOOLS as TOOLS
from tests.unit.tool_parsers.tools import args

P = CommandRParser

R7B_CALLS = (
    "<|START_THINKING|>I will check the weather in Paris and search for events.<|END_THINKING|>"
    "<|START_ACTION|>[\n"
    '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": "Paris", "days": 2}},\n'
    '    {"tool_call_id": "1", "tool_name": "search_web", "parameters": {"query": "Paris events",  "limit": 3}}\n'
    "]<|END_ACTION|>"
)


def test_r7b_plan_and_two_calls():
    out = check_stream(P, R7B_CALLS, TOOLS)
    assert out.content == ""
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert out.tool_calls[0].arguments == '{"city": "Paris", "days": 2}'
    assert out.tool_calls[1].arguments == '{"query": "Paris events",  "limit": 3}'  # model's own text
    assert out.tool_calls[0].id.startswith("call_")


def test_r7b_thinking_streams_as_reasoning():
    pieces = [R7B_CALLS[i : i + 5] for i in range(0, len(R7B_CALLS), 5)]
    delta = stream(P, pieces, TOOLS)
    assert delta.reasoning == "I will check the weather in Paris and search for events."
    assert delta.content == ""


def test_r7b_response_section():
    text = "<|START_RESPONSE|>It is 18 °C and sunny in Paris — enjoy! ☀️<|END_RESPONSE|>"
    out = check_stream(P, text, TOOLS)
    assert out.content == "It is 18 °C and sunny in Paris — enjoy! ☀️" and out.tool_calls == []


def test_plain_reply():
    text = "Hello! I can help with weather questions.\nWhat city?"
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_nested_parameters_keep_model_text():
    params = '{"city": "Zürich", "filters": {"min_temp": -4, "label": "kalt"}, "tags": ["Schnee"]}'
    text = f'<|START_ACTION|>[{{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {params}}}]<|END_ACTION|>'
    out = check_stream(P, text, TOOLS)
    assert out.tool_calls[0].arguments == params


def test_command_r_fenced_action():
    text = (
        "I'll search for that.\n"
        "Action: ```json\n"
        "[\n"
        "    {\n"
        '        "tool_name": "search_web",\n'
        '        "parameters": {\n'
        '            "query": "biggest penguin"\n'
        "        }\n"
        "    }\n"
        "]\n"
        "```"
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == "I'll search for that."
    assert out.tool_calls[0].name == "search_web"
    assert args(out.tool_calls[0]) == {"query": "biggest penguin"}


def test_react_action_input_form():
    text = 'Thought: I need the weather.\nAction: get_weather\nAction Input: {"city": "Lima"}'
    out = check_stream(P, text, TOOLS)
    assert out.content == "Thought: I need the weather."
    assert out.tool_calls[0].name == "get_weather"
    assert out.tool_calls[0].arguments == '{"city": "Lima"}'


def test_action_in_prose_is_content():
    text = (
        "Action: take an umbrella.\n"
        "The word Action: appears mid-line here.\n"
        "Action: get_weather is a tool\n"
        "Action:\nnothing follows"
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_false_alarm_partial_marker():
    text = "Tokens like <|START_ and <|END_X|> are just text; so is <|START_ACTIO."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_string_encoded_parameters_and_missing_parameters():
    text = (
        '<|START_ACTION|>[{"tool_name": "get_weather", "parameters": "{\\"city\\": \\"Kyiv\\"}"},'
        ' {"tool_name": "search_web"}]<|END_ACTION|>'
    )
    out = check_stream(P, text, TOOLS)
    assert [c.arguments for c in out.tool_calls] == ['{"city": "Kyiv"}', "{}"]


def test_unfinished_action():
    complete_json = '<|START_ACTION|>[{"tool_name": "get_weather", "parameters": {"city": "Rome"}}]'
    out = check_stream(P, complete_json, TOOLS)
    assert [c.name for c in out.tool_calls] == ["get_weather"]  # only the end marker is missing
    truncated = '<|START_ACTION|>[{"tool_name": "get_weather", "parameters": {"city": "Ro'
    out = check_stream(P, truncated, TOOLS)
    assert out.tool_calls == [] and out.content == ""


def test_matches_template():
    r7b = (
        "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% if message.tool_calls %}<|START_THINKING|>{{message.tool_plan}}"
        "<|END_THINKING|><|START_ACTION|>[\n{% for tc in message.tool_calls %}"
    )
    command_r = (
        "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Write 'Action:' followed by a json-formatted list of actions"
        " that you want to perform in order to produce a good response to the user's last input."
    )
    assert P.matches_template(r7b) and P.matches_template(command_r)
    assert not P.matches_template("<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ message['content'] }}<|END_OF_TURN_TOKEN|>")
