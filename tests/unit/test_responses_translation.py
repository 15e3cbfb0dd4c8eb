"""Responses input items, tools and text.format as a chat turn; the capsule; the
reasoning echo."""

from __future__ import annotations

import pytest

from mlxcel.api.responses.capsule import Capsule, decode_capsule, encode_capsule
from mlxcel.api.responses.input_items import SUMMARY_HEADING, as_items, collapse, items_to_messages, replay
from mlxcel.api.responses.reasoning_echo import ReasoningEcho
from mlxcel.api.responses.translate import chat_messages, chat_tool_choice, chat_tools, response_format, turn_spec
from mlxcel.api.responses.wire import ResponsesRequest
from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.media_parts import SENT_AT
from mlxcel.chat.messages import normalise_messages

CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'}
RESULT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}


def test_string_input_is_one_user_message():
    assert items_to_messages(as_items("hi")) == [{"role": "user", "content": "hi"}]


def test_role_without_type_is_a_message_and_text_parts_join():
    items = [{"role": "developer", "content": "Be brief."},
             {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}]
    assert items_to_messages(items) == [{"role": "developer", "content": "Be brief."},
                                        {"role": "user", "content": "a\nb"}]


def test_previous_output_replays_as_input():
    output = [
        {"id": "rs_1", "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Let me check.", "annotations": []},
                     {"type": "refusal", "refusal": "no"}]},
        {**CALL, "id": "fc_1", "status": "completed"},
        {**CALL, "call_id": "call_2", "arguments": '{"city":"Rome"}'},
    ]
    messages = items_to_messages([{"role": "user", "content": "weather?"}, *output, RESULT,
                                  {**RESULT, "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]}])
    assistant = messages[1]
    assert assistant["content"] == "Let me check.\nno" and assistant["reasoning_content"] == "hmm"
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert assistant["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}
    assert messages[2:] == [{"role": "tool", "tool_call_id": "call_1", "content": "sunny", "name": "get_weather"},
                            {"role": "tool", "tool_call_id": "call_2", "content": "rain", "name": "get_weather"}]


def test_instructions_join_the_leading_system_messages():
    messages = chat_messages("Answer in French.", [{"role": "system", "content": "Be brief."},
                                                   {"role": "user", "content": "hi"}])
    assert messages == [{"role": "system", "content": "Answer in French.\n\nBe brief."},
                        {"role": "user", "content": "hi"}]


def test_leading_system_messages_with_media_join_as_parts():
    image = {"type": "input_image", "image_url": "http://x/y.png"}
    messages = chat_messages("Answer in French.", [{"role": "developer", "content": [image]},
                                                   {"role": "user", "content": "hi"}])
    assert messages == [{"role": "system", "content": [
        {"type": "text", "text": "Answer in French."}, {"type": "text", "text": ""},
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}, SENT_AT: "input[0].content[0]"}]},
        {"role": "user", "content": "hi"}]


def test_media_parts_become_chat_media_parts():
    messages = items_to_messages([{"role": "user", "content": [
        {"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "http://x/y.png"},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}])
    assert messages == [{"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}, SENT_AT: "input[0].content[1]"},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}, SENT_AT: "input[0].content[2]"}]}]


def test_a_refused_image_is_named_where_the_client_sent_it():
    """Instructions and a stored conversation come before the request's own items: its
    image is input[1].content[1] to the client, whatever its place in the history."""
    prior = [{"type": "message", "role": "user", "content": "earlier"},
             {"type": "message", "role": "assistant", "content": "noted"}]
    sent = [{"role": "user", "content": "look"},
            {"role": "user", "content": [{"type": "input_text", "text": "this"},
                                         {"type": "input_image", "image_url": "http://x/y.png"}]}]
    messages = chat_messages("Answer in French.", prior + as_items(sent), n_input=2)
    with pytest.raises(ChatInputError, match=r"^input\[1\]\.content\[1\]: image_url input is not supported"):
        normalise_messages(messages)
    history_image = chat_messages(None, as_items(sent) + prior, n_input=2)
    with pytest.raises(ChatInputError, match=r"^history\[1\]\.content\[1\]"):
        normalise_messages(history_image)


@pytest.mark.parametrize("part, needle", [
    ({"type": "input_image", "file_id": "file_1"}, "file_id"),
    ({"type": "input_file", "file_id": "file_1"}, "input_file"),
    ({"type": "mystery"}, "unknown content part"),
])
def test_media_and_file_parts_are_rejected(part, needle):
    with pytest.raises(ChatInputError, match=needle):
        items_to_messages([{"role": "user", "content": [part]}])


def test_unknown_items_and_roles_are_rejected():
    with pytest.raises(ChatInputError, match="web_search_call"):
        items_to_messages([{"type": "web_search_call", "id": "x"}])
    with pytest.raises(ChatInputError, match="role"):
        items_to_messages([{"role": "tool", "content": "x"}])
    with pytest.raises(ChatInputError, match="call_id"):
        items_to_messages([{"type": "function_call", "name": "f"}])


def test_compaction_item_replays_summary_and_retained_items():
    capsule = encode_capsule(Capsule("Tom lives in Paris.", [{"role": "user", "content": "And my name?"}]))
    items = [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "My name is Tom."},
             {"role": "user", "content": "And my name?"},  # shown for the client; the capsule carries it
             {"type": "compaction", "id": "cmp_1", "encrypted_content": capsule},
             {"role": "assistant", "content": "Tom."}]
    replayed = replay(items)
    assert [i.get("content") for i in replayed] == [
        "Be brief.", SUMMARY_HEADING + "Tom lives in Paris.", "And my name?", "Tom."]
    assert items_to_messages(replayed)[0] == {"role": "system",
                                              "content": "Be brief.\n\n" + SUMMARY_HEADING + "Tom lives in Paris."}
    assert collapse(items) == [items[0], *items[3:]]


def test_capsule_round_trip_and_garbage():
    capsule = Capsule("s", [CALL, RESULT])
    text = encode_capsule(capsule)
    assert "=" not in text and "+" not in text and "/" not in text
    assert decode_capsule(text, "input[0]") == capsule
    for bad in ("", "!!!", encode_capsule(capsule)[:-6], "eyJ2IjoyfQ"):
        with pytest.raises(ChatInputError, match="encrypted_content"):
            decode_capsule(bad, "input[0]")


def test_function_tools_translate_and_hosted_tools_are_rejected():
    tools = chat_tools([{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"},
                         "strict": True}])
    assert tools == [{"type": "function", "function": {"name": "f", "description": "d",
                                                       "parameters": {"type": "object"}, "strict": True}}]
    for kind in ("web_search", "file_search", "computer_use_preview", "code_interpreter", "image_generation", "mcp",
                 "custom", "apply_patch", "function_shell"):
        with pytest.raises(ChatInputError, match=kind):
            chat_tools([{"type": kind}])


def test_tool_choice_shapes():
    tools = chat_tools([{"type": "function", "name": "f"}, {"type": "function", "name": "g"}])
    assert chat_tool_choice("required", tools) == ("required", tools)
    assert chat_tool_choice({"type": "function", "name": "g"}, tools)[0] == {"type": "function",
                                                                          "function": {"name": "g"}}
    mode, allowed = chat_tool_choice({"type": "allowed_tools", "mode": "required",
                                      "tools": [{"type": "function", "name": "g"}]}, tools)
    assert mode == "required" and [t["function"]["name"] for t in allowed] == ["g"]
    with pytest.raises(ChatInputError):
        chat_tool_choice({"type": "web_search_preview"}, tools)


def test_text_format_becomes_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert response_format(None) is None and response_format({"format": {"type": "text"}}) is None
    assert response_format({"format": {"type": "json_schema", "name": "x", "schema": schema, "strict": True}}) == {
        "type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    with pytest.raises(ChatInputError):
        response_format({"format": {"type": "grammar"}})


@pytest.mark.parametrize("field, value, noun", [("schema", True, "an object"), ("schema", "{}", "an object"),
                                                ("name", 5, "a string"), ("strict", "yes", "a boolean")])
def test_a_malformed_text_format_is_named_as_sent(field, value, noun):
    """It was named as chat's response_format.json_schema, a field the request lacks."""
    with pytest.raises(ChatInputError, match=f"^text.format.{field} must be {noun}$") as info:
        response_format({"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, field: value}})
    assert info.value.code == "invalid_response_format"


def test_reasoning_echo_restores_a_turn_replayed_without_its_reasoning():
    echo = ReasoningEcho(max_bytes=1000)
    output = [{"type": "reasoning", "content": [{"type": "reasoning_text", "text": "think"}]},
              {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
              {**CALL}]
    echo.remember(output)
    replayed = items_to_messages([{"role": "user", "content": "q"}, *output[1:]])
    assert echo.lookup(replayed[1]) == "think"
    assert echo.lookup({"role": "assistant", "content": "other"}) is None
    assert ReasoningEcho(max_bytes=0).lookup(replayed[1]) is None
    off = ReasoningEcho(max_bytes=1000, enabled=False)
    off.remember(output)
    assert off.lookup(replayed[1]) is None


def test_reasoning_echo_skips_a_compaction_item_in_the_output():
    echo = ReasoningEcho(max_bytes=1000)
    echo.remember([{"type": "compaction", "encrypted_content": encode_capsule(Capsule("s", []))},
                   {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "think"}]},
                   {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}])
    assert echo.lookup({"role": "assistant", "content": "ok"}) == "think"


@pytest.mark.parametrize("parallel, limit", [(False, 1), (True, None), (None, None)])
def test_parallel_tool_calls_false_limits_the_turn_to_one_call(parallel, limit):
    """The turn's parser enforces the limit (and stops the generation there) for every API."""
    data = {"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {}}]}
    if parallel is not None:
        data["parallel_tool_calls"] = parallel
    body = ResponsesRequest.model_validate(data)
    spec = turn_spec(data, body, [{"type": "message", "role": "user", "content": "hi"}], {})
    assert spec.max_tool_calls == limit and [t["function"]["name"] for t in spec.tools] == ["f"]
