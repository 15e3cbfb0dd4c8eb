"""The output builder: items and typed events from parsed deltas."""

from __future__ import annotations

from mlxcel.api.responses.events import EventSequence, OutputBuilder, sse_event
from mlxcel.chat.deltas import ParsedDelta, ToolCall, ToolCallDelta


def _run(deltas, calls=(), status="completed"):
    builder = OutputBuilder(EventSequence())
    events = []
    for delta in deltas:
        events += builder.feed(delta)
    events += builder.finish(list(calls), status)
    return builder.output, events


def test_text_events_in_the_spec_order():
    output, events = _run([ParsedDelta(content="Hel"), ParsedDelta(), ParsedDelta(content="lo")])
    assert [e["type"] for e in events] == [
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-3]["text"] == "Hello"
    (message,) = output
    assert message["type"] == "message" and message["content"][0]["text"] == "Hello"
    assert message["status"] == "completed" and message["id"] == events[0]["item"]["id"]


def test_reasoning_item_comes_ahead_of_the_message():
    output, events = _run([ParsedDelta(reasoning="think"), ParsedDelta(reasoning=" more"), ParsedDelta(content="ok")])
    types = [e["type"] for e in events]
    assert types[:5] == ["response.output_item.added", "response.content_part.added",
                         "response.reasoning_text.delta", "response.reasoning_text.delta",
                         "response.reasoning_text.done"]
    assert types.index("response.output_text.delta") > types.index("response.reasoning_text.done")
    assert [i["type"] for i in output] == ["reasoning", "message"]
    assert output[0]["content"] == [{"type": "reasoning_text", "text": "think more"}]
    assert events[2]["output_index"] == 0 and events[-1]["output_index"] == 1


def test_function_call_arguments_stream_and_end_equal_to_the_final_parse():
    deltas = [ParsedDelta(tool_calls=[ToolCallDelta(0, id="call_a", name="f")]),
              ParsedDelta(tool_calls=[ToolCallDelta(0, arguments='{"x":')]),
              ParsedDelta(tool_calls=[ToolCallDelta(0, arguments=' 1}')])]
    output, events = _run(deltas, [ToolCall("f", '{"x": 1}', "call_a")])
    assert [e["type"] for e in events] == [
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done"]
    assert events[3]["arguments"] == '{"x": 1}'
    assert output == [{"id": events[0]["item"]["id"], "type": "function_call", "call_id": "call_a", "name": "f",
                       "arguments": '{"x": 1}', "status": "completed"}]


def test_empty_generation_still_has_a_message_and_incomplete_marks_it():
    output, events = _run([], status="incomplete")
    assert output[0]["type"] == "message" and output[0]["status"] == "incomplete"
    assert output[0]["content"][0]["text"] == ""
    assert _run([], status="cancelled")[0] == []


def test_sse_frames_name_the_event():
    assert sse_event({"type": "response.created", "sequence_number": 0}) == (
        'event: response.created\ndata: {"type":"response.created","sequence_number":0}\n\n')


def test_logprobs_of_held_back_and_reasoning_tokens():
    builder = OutputBuilder(EventSequence())
    lp = [{"token": t, "logprob": -1.0, "bytes": [], "top_logprobs": []} for t in "abcde"]
    builder.feed(ParsedDelta(reasoning="r"), [lp[0]])  # reasoning tokens carry none
    builder.feed(ParsedDelta(), [lp[1]])  # held back
    events = builder.feed(ParsedDelta(content="x"), [lp[2]])
    assert events[-1]["logprobs"] == [lp[1], lp[2]]
    builder.feed(ParsedDelta(), [lp[3]])  # e.g. an end token with no text
    builder.finish([], "completed")
    assert builder.output[1]["content"][0]["logprobs"] == lp[1:4]
