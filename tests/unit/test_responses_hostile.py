"""Malformed nested shapes in a Responses request are 400s (ChatInputError or a
validation error) at translation, never another exception."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from mlxcel.api.responses.response_run import ResponseRun
from mlxcel.api.responses.state import ResponsesState
from mlxcel.api.responses.wire import ResponsesRequest
from mlxcel.chat.errors import ChatInputError
from mlxcel.config import ResponsesLimits
from mlxcel.http.errors import APIError, as_api_error
from mlxcel.http.json_body import validate
from mlxcel.turn.context import RequestContext
from mlxcel.turn.errors import TurnError
from tests.fixtures.hostile_responses import HOSTILE_BODIES


def translate(data: dict) -> None:
    """What POST /v1/responses does with a body before rendering it."""
    body = validate(ResponsesRequest, data)
    state = ResponsesState(ResponsesLimits(), prompt_cache=True)
    host = SimpleNamespace(model_id="m", config=SimpleNamespace(chat_template_kwargs={}))
    run = ResponseRun(state, host, data, body, RequestContext("resp_test"))
    asyncio.run(run.translate())


@pytest.mark.parametrize("name", list(HOSTILE_BODIES))
def test_hostile_bodies_are_400s(name):
    with pytest.raises((ChatInputError, APIError, TurnError)) as exc:
        translate(HOSTILE_BODIES[name])
    error = as_api_error(exc.value)
    assert error.status == 400 and error.type == "invalid_request_error" and error.message
    assert set(error.body()["error"]) >= {"message", "type", "code"}


def test_a_well_formed_body_translates():
    translate({"input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                         {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "hmm"}],
                          "summary": [{"type": "summary_text", "text": "s"}]},
                         {"type": "function_call", "call_id": "c", "name": "f", "arguments": "[[1]]"},
                         {"type": "function_call_output", "call_id": "c", "output": "r"}],
               "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
               "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]}})


@pytest.mark.parametrize(("metadata", "words"), [
    ({f"k{i}": "v" for i in range(17)}, "at most 16 key-value pairs"),
    ({"k" * 65: "v"}, "longer than 64"),
    ({"k": {"nested": "object"}}, "must be a string"),
    ({"k": 3}, "must be a string"),
    ({"k": "v" * 513}, "longer than 512"),
])
def test_metadata_past_openai_s_bounds_is_400(metadata, words):
    with pytest.raises(APIError) as exc:
        validate(ResponsesRequest, {"input": "hi", "metadata": metadata})
    assert exc.value.status == 400 and words in exc.value.message and "metadata" in exc.value.message


def test_metadata_within_the_bounds_is_kept():
    metadata = {f"k{i}": "v" * 512 for i in range(16)}
    assert validate(ResponsesRequest, {"input": "hi", "metadata": metadata}).metadata == metadata
