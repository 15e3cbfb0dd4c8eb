"""The Anthropic Messages edge: request -> chat turn, parsed output -> blocks and events."""

from __future__ import annotations

import json

import pytest

from mlxcel.api.anthropic.stream import MessageStream
from mlxcel.api.anthropic.translate import (
    chat_messages,
    chat_tool_choice,
    chat_tools,
    content_blocks,
    max_tool_calls,
    stop_reason,
    tool_input,
    turn_spec,
)
from mlxcel.api.anthropic.wire import CountTokensRequest, MessagesRequest
from mlxcel.chat.deltas import ParsedDelta, ToolCall, ToolCallDelta
from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.media_parts import SENT_AT
from mlxcel.chat.messages import normalise_messages
from mlxcel.chat.output import FinalChat
from mlxcel.engine.request import FinishEvent, FinishReason, Timings
from mlxcel.fleet.errors import ModelLoadDeferred
from mlxcel.http.errors import APIError, as_api_error, server_busy
from mlxcel.structured.errors import ResponseFormatError
from mlxcel.turn.chat_turn import ChatOutcome

WEATHER = {"name": "get_weather", "description": "Weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


def _request(**fields) -> MessagesRequest:
    return MessagesRequest.model_validate({"max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}],
                                           **fields})


def test_system_and_plain_messages():
    body = _request(system=[{"type": "text", "text": "Be terse."}, {"type": "text", "text": "Be kind.",
                                                                      "cache_control": {"type": "ephemeral"}}],
                    messages=[{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text",
                                                                                         "text": "b"}]},
                              {"role": "assistant", "content": "c"}])
    assert chat_messages(body.system, body.messages) == [
        {"role": "system", "content": "Be terse.\nBe kind."},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "c"},
    ]


def test_tool_use_and_results_become_chat_tool_calls_and_tool_messages():
    body = _request(messages=[
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "use the tool", "signature": "x"},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "21C"}]},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "text", "text": "Thanks"},
        ]},
    ])
    _, assistant, result, user = chat_messages(None, body.messages)
    assert assistant == {
        "role": "assistant", "content": "Let me check.", "reasoning_content": "use the tool",
        "tool_calls": [{"id": "toolu_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
    }
    assert result == {"role": "tool", "tool_call_id": "toolu_1", "content": "21C", "name": "get_weather"}
    assert user == {"role": "user", "content": "Thanks"}


def test_only_tool_results_make_no_empty_user_message():
    body = _request(messages=[{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}])
    assert chat_messages(None, body.messages) == [{"role": "tool", "tool_call_id": "t", "content": "ok"}]


def test_image_blocks_become_chat_image_parts():
    content = [{"type": "text", "text": "see"},
               {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
               {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]
    messages = chat_messages(None, _request(messages=[{"role": "user", "content": content}]).messages)
    assert messages == [{"role": "user", "content": [
        {"type": "text", "text": "see"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}, SENT_AT: "messages[0].content[1]"},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}, SENT_AT: "messages[0].content[2]"}]}]


def test_a_refused_image_is_named_where_the_client_sent_it():
    """The system prompt and the tool results become messages of their own: the
    translated image sits at messages[4].content[1], the client's at messages[2].content[2]."""
    body = _request(system="be brief", messages=[
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"},
                                     {"type": "text", "text": "look"},
                                     {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]},
    ])
    with pytest.raises(ChatInputError, match=r"^messages\[2\]\.content\[2\]: image_url input is not supported"):
        normalise_messages(chat_messages(body.system, body.messages))


def test_a_tool_result_image_is_placed_by_the_chat_layer_at_its_own_path():
    body = _request(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "text", "text": "shot"}, {"type": "image", "source": {"type": "url", "url": "https://e.com/a.png"}}]}]}])
    (tool,) = chat_messages(None, body.messages)
    assert tool["role"] == "tool" and [part["type"] for part in tool["content"]] == ["text", "image_url"]
    with pytest.raises(ChatInputError, match=r"^messages\[0\]\.content\[0\]\.content\[1\]: image_url input is not"):
        normalise_messages([tool])  # a server without a vision projector


@pytest.mark.parametrize("content, needle", [
    ([{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}], "not supported"),
    ([{"type": "image", "source": {"type": "base64", "media_type": "image/tiff", "data": "AAAA"}}], "media_type"),
    ([{"type": "image", "source": {"type": "file", "file_id": "f"}}], "source.type"),
])
def test_media_anthropic_cannot_place_is_refused(content, needle):
    body = _request(messages=[{"role": "user", "content": content}])
    with pytest.raises(ChatInputError, match=needle):
        chat_messages(None, body.messages)


def test_a_thinking_block_that_is_not_text_is_refused():
    body = _request(messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [
        {"type": "thinking", "thinking": {"a": 1}, "signature": "s"}, {"type": "text", "text": "Hello"}]},
        {"role": "user", "content": "Again"}])
    with pytest.raises(ChatInputError, match=r"messages\[1\]\.content\[0\]\.thinking must be a string"):
        chat_messages(None, body.messages)


def test_unknown_block_type_is_refused():
    body = _request(messages=[{"role": "user", "content": [{"type": "hologram"}]}])
    with pytest.raises(ChatInputError, match="hologram"):
        chat_messages(None, body.messages)


@pytest.mark.parametrize("system, content", [
    ([{"type": []}, {"type": "text", "text": "b"}], "Hi"),
    (None, [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": {"a": 1}}]}]),
    (None, [{"type": "tool_result", "tool_use_id": "t", "content": [{"text": "no type"}]}]),
])
def test_block_without_a_string_type_is_refused(system, content):
    """System blocks and tool_result parts reach the translation unchecked (found by
    tests/e2e/test_fuzz.py: an unhashable type was a 500)."""
    body = _request(system=system, messages=[{"role": "user", "content": content}])
    with pytest.raises(ChatInputError, match="type must be a string"):
        chat_messages(body.system, body.messages)


def test_tools_and_tool_choice():
    body = _request(tools=[WEATHER, WEB_SEARCH])
    tools = chat_tools(body.tools)
    assert tools == [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                                       "parameters": WEATHER["input_schema"]}}]
    assert chat_tool_choice(None, tools) is None
    assert chat_tool_choice({"type": "auto"}, tools) == "auto"
    assert chat_tool_choice({"type": "none"}, tools) == "none"
    assert chat_tool_choice({"type": "any", "disable_parallel_tool_use": True}, tools) == "required"
    assert chat_tool_choice({"type": "tool", "name": "get_weather"}, tools) == {
        "type": "function", "function": {"name": "get_weather"}}
    with pytest.raises(ChatInputError, match="any"):
        chat_tool_choice({"type": "any"}, [])
    with pytest.raises(ChatInputError, match="tool_choice.type"):
        chat_tool_choice({"type": "function"}, tools)


@pytest.mark.parametrize("tool", [{"name": "f"}, {"name": "f", "type": "custom"},
                                  {"name": "f", "description": "no schema", "input_schema": None}])
def test_a_client_tool_without_input_schema_is_refused(tool):
    """Anthropic's 400 "tools.0.input_schema: Field required"; it was dropped silently, so
    a tool_choice naming it read as naming an undeclared tool."""
    with pytest.raises(ValueError, match="input_schema: Field required"):
        _request(tools=[tool])


def test_a_custom_tool_with_a_schema_is_a_client_tool():
    tool = {**WEATHER, "type": "custom"}
    assert chat_tools(_request(tools=[tool]).tools)[0]["function"]["name"] == "get_weather"


def test_disable_parallel_tool_use_allows_one_call():
    assert max_tool_calls(None) is None
    assert max_tool_calls({"type": "auto"}) is None
    assert max_tool_calls({"type": "auto", "disable_parallel_tool_use": False}) is None
    assert max_tool_calls({"type": "any", "disable_parallel_tool_use": True}) == 1
    with pytest.raises(ChatInputError, match="disable_parallel_tool_use"):
        max_tool_calls({"type": "auto", "disable_parallel_tool_use": "yes"})
    spec = turn_spec({}, _request(tools=[WEATHER], tool_choice={"type": "auto", "disable_parallel_tool_use": True}),
                     {})
    assert spec.max_tool_calls == 1


def test_turn_spec_fields():
    data = {"max_tokens": 32, "messages": [{"role": "user", "content": "Hi"}], "stop_sequences": ["END"],
            "stop": ["ignored"], "temperature": 0.5, "top_k": 5, "thinking": {"type": "enabled",
                                                                             "budget_tokens": 100},
            "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
            "metadata": {"user_id": "u"}, "service_tier": "auto", "container": "c"}
    spec = turn_spec(data, MessagesRequest.model_validate(data), {"enable_thinking": False, "other": 1})
    assert spec.max_tokens == 32 and spec.sampling.stop == ["END"]
    assert spec.sampling.temperature == 0.5 and spec.sampling.top_k == 5
    assert spec.template_kwargs == {"enable_thinking": True, "other": 1}
    assert spec.thinking_budget == 100
    assert spec.response_format == {"type": "json_schema", "schema": {"type": "object"}}
    disabled = {**data, "thinking": {"type": "disabled"}}
    spec = turn_spec(disabled, MessagesRequest.model_validate(disabled), {})
    assert spec.template_kwargs == {"enable_thinking": False} and spec.thinking_budget is None


@pytest.mark.parametrize("fields, words", [
    ({"output_config": {"format": "json"}}, "output_config.format must be an object"),
    ({"output_config": {"format": {"type": "json_schema", "schema": []}}}, "output_config.format.schema must be"),
    ({"output_config": {"format": {"type": "json_schema", "schema": {}, "name": 3}}}, "output_config.format.name"),
    ({"output_format": {"type": "xml"}}, "output_format.type must be one of"),
    ({"response_format": {"type": "json_schema", "json_schema": {"schema": 1}}},
     "response_format.json_schema.schema must be"),
])
def test_a_malformed_output_format_is_named_as_sent(fields, words):
    data = {"max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}], **fields}
    with pytest.raises(ResponseFormatError, match=words):
        turn_spec(data, MessagesRequest.model_validate(data), {})


def test_count_tokens_body_needs_no_max_tokens():
    data = {"messages": [{"role": "user", "content": "Hi"}], "tools": [WEATHER]}
    spec = turn_spec(data, CountTokensRequest.model_validate(data), {})
    assert spec.messages == [{"role": "user", "content": "Hi"}] and len(spec.tools) == 1


def _final(content="", reasoning="", calls=()) -> FinalChat:
    return FinalChat(content=content, reasoning=reasoning, tool_calls=list(calls))


def _outcome(final: FinalChat, reason=FinishReason.STOP, stop_word=None, tail=None, owed=()) -> ChatOutcome:
    finish = FinishEvent(reason, prompt_tokens=7, completion_tokens=5, cached_tokens=0, timings=Timings(),
                         stop_word=stop_word)
    return ChatOutcome(final=final, finish=finish, owed=list(owed), tail=tail or ParsedDelta())


def test_content_blocks_and_stop_reasons():
    call = ToolCall("get_weather", '{"city": "Paris"}', id="call_abc")
    blocks = content_blocks(_final("\n", "hmm", [call]))
    assert [b["type"] for b in blocks] == ["thinking", "tool_use"]
    assert blocks[0]["thinking"] == "hmm" and blocks[0]["signature"]
    assert blocks[1] == {"type": "tool_use", "id": "toolu_abc", "name": "get_weather", "input": {"city": "Paris"}}
    assert content_blocks(_final("Hi")) == [{"type": "text", "text": "Hi"}]
    assert content_blocks(_final()) == []
    assert stop_reason(_outcome(_final(calls=[call]))) == ("tool_use", None)
    assert stop_reason(_outcome(_final("x"), FinishReason.LENGTH)) == ("max_tokens", None)
    assert stop_reason(_outcome(_final(calls=[call]), FinishReason.LENGTH)) == ("max_tokens", None)  # a cut call
    assert stop_reason(_outcome(_final("x"), stop_word="END")) == ("stop_sequence", "END")
    assert stop_reason(_outcome(_final("x"))) == ("end_turn", None)


@pytest.mark.parametrize("arguments, expected", [
    ('{"a": 1}', {"a": 1}), ("", {}), ("[1]", {}), ("{oops", {}),
    # what the tool parsers pass on as a call's text but Python's parser refuses (was a 500)
    ('{"n": 1' + "0" * 5000 + "}", {}), ('{"n": ' + "[" * 5000 + "]" * 5000 + "}", {}),
])
def test_tool_input(arguments, expected):
    assert tool_input(arguments) == expected


def _events(chunks: list[str]) -> list[tuple[str, dict]]:
    out = []
    for chunk in chunks:
        name, data = chunk.split("\n", 1)
        assert name.startswith("event: ") and data.startswith("data: ") and chunk.endswith("\n\n")
        payload = json.loads(data[6:])
        assert payload["type"] == name[7:]
        out.append((name[7:], payload))
    return out


def test_stream_blocks_in_order():
    writer = MessageStream("msg_1", "m", 7)
    chunks = writer.start()
    chunks += writer.feed(ParsedDelta(reasoning="Let me"))
    chunks += writer.feed(ParsedDelta(reasoning=" think"))
    chunks += writer.feed(ParsedDelta(content="\n"))  # held: whitespace opens no block
    chunks += writer.feed(ParsedDelta(tool_calls=[ToolCallDelta(0, id="call_x", name="get_weather")]))
    chunks += writer.feed(ParsedDelta(tool_calls=[ToolCallDelta(0, arguments='{"city": ')]))
    call = ToolCall("get_weather", '{"city": "Paris"}', id="call_x")
    chunks += writer.finish(_outcome(_final("\n", "Let me think", [call]),
                                     owed=[ToolCallDelta(0, arguments='"Paris"}')]))
    events = _events(chunks)
    assert [name for name, _ in events] == [
        "message_start", "ping",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_delta",
        "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]
    start = events[0][1]["message"]
    assert start["id"] == "msg_1" and start["content"] == [] and start["usage"] == {"cache_read_input_tokens": 0,
                                                                                    "input_tokens": 7,
                                                                                    "output_tokens": 0}
    assert events[2][1] == {"type": "content_block_start", "index": 0,
                            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}
    assert events[5][1]["delta"]["type"] == "signature_delta"
    assert events[7][1]["content_block"] == {"type": "tool_use", "id": "toolu_x", "name": "get_weather",
                                             "input": {}}
    fragments = [p["delta"]["partial_json"] for _, p in events if p.get("delta", {}).get("type") == "input_json_delta"]
    assert json.loads("".join(fragments)) == {"city": "Paris"}
    assert events[-2][1]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[-2][1]["usage"] == {"cache_read_input_tokens": 0, "input_tokens": 7, "output_tokens": 5}


@pytest.mark.parametrize("fragments, sent", [
    (['"Par', 'is"'], ""),  # a string: the whole message's input is {}, so is the stream's
    (["  ", "[1,", " 2]"], ""),
    (["  ", '{"city":', ' "Paris"}'], '  {"city": "Paris"}'),  # held whitespace goes with the object
])
def test_stream_sends_only_object_arguments_as_partial_json(fragments, sent):
    """A client assembles a tool_use input from the partial_json fragments and parses
    it; arguments that are no object would fail there where the whole message says {}."""
    writer = MessageStream("msg_1", "m", 1)
    chunks = writer.feed(ParsedDelta(tool_calls=[ToolCallDelta(0, id="call_x", name="f")]))
    for fragment in fragments:
        chunks += writer.feed(ParsedDelta(tool_calls=[ToolCallDelta(0, arguments=fragment)]))
    chunks += writer.finish(_outcome(_final("", "", [ToolCall("f", "".join(fragments), id="call_x")])))
    events = _events(chunks)
    partial = [p["delta"]["partial_json"] for _, p in events if p.get("delta", {}).get("type") == "input_json_delta"]
    assert "".join(partial) == sent and all(partial)
    assert [name for name, _ in events][:1] == ["content_block_start"] and events[-1][0] == "message_stop"


def test_stream_text_keeps_held_whitespace_once_text_comes():
    writer = MessageStream("msg_1", "m", 1)
    chunks = writer.feed(ParsedDelta(content="  "))
    assert chunks == []
    chunks = writer.feed(ParsedDelta(content="Hi")) + writer.feed(ParsedDelta(content=" there"))
    chunks += writer.finish(_outcome(_final("  Hi there"), stop_word="END"))
    events = _events(chunks)
    texts = [p["delta"]["text"] for name, p in events if name == "content_block_delta"]
    assert "".join(texts) == "  Hi there"
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "END"}


def test_error_shapes():
    busy = server_busy()
    assert busy.anthropic_status() == 529
    assert busy.anthropic_body() == {"type": "error", "error": {"type": "overloaded_error",
                                                                "message": busy.message}}
    assert as_api_error(ChatInputError("bad")).anthropic_body()["error"]["type"] == "invalid_request_error"
    assert APIError(401, "no", "invalid_api_key").anthropic_body()["error"]["type"] == "authentication_error"
    assert APIError(413, "big", "invalid_request_error").anthropic_body()["error"]["type"] == "request_too_large"
    assert APIError(500, "x", "server_error").anthropic_body()["error"]["type"] == "api_error"
    unknown = APIError(404, "no model x", "model_not_found", "model_not_found", available_models=["a"])
    assert unknown.anthropic_body() == {"type": "error", "error": {"type": "not_found_error", "message": "no model x",
                                                                   "available_models": ["a"]}}
    assert as_api_error(RuntimeError()).status == 500
    # every "no capacity now" 503 is Anthropic's overloaded 529; an engine that failed is not
    deferred = as_api_error(ModelLoadDeferred("model `a` cannot load now", retry_after=2))
    assert deferred.status == 503 and deferred.anthropic_status() == 529
    assert deferred.anthropic_body()["error"]["type"] == "overloaded_error"
    failed = APIError(503, "the engine failed", "unavailable_error", "engine_failed")
    assert failed.anthropic_status() == 503 and failed.anthropic_body()["error"]["type"] == "api_error"
    _, payload = _events([MessageStream.error(busy)])[0]
    assert payload["error"]["type"] == "overloaded_error"
