"""A profile's defaults filled into each API's body: only where the body has no
value, under the API's own field names, and the system prompt and template kwargs
in each API's place. The filled bodies still validate against the wire models."""

from __future__ import annotations

import copy

import pytest

from mlxcel.api.anthropic.wire import MessagesRequest
from mlxcel.api.native.wire import NativeCompletionRequest
from mlxcel.api.openai.chat_wire import ChatCompletionRequest
from mlxcel.api.openai.completions_wire import CompletionRequest
from mlxcel.api.responses.wire import ResponsesRequest
from mlxcel.fleet.profile_apply import apply_defaults
from mlxcel.fleet.profiles import RequestDefaults

USER = [{"role": "user", "content": "hi"}]
DEFAULTS = RequestDefaults(
    profile="p",
    sampling={"temperature": 0.3, "top_k": 7, "max_tokens": 50, "stop": ["END"], "repetition_penalty": 1.1,
              "thinking_budget": 32, "seed": 5},
    system="Be terse.",
    chat_template_kwargs={"enable_thinking": False, "reasoning_effort": "low", "x": 1},
)
BODIES = {
    "chat": ({"messages": USER}, ChatCompletionRequest),
    "completions": ({"prompt": "hi"}, CompletionRequest),
    "native": ({"prompt": "hi"}, NativeCompletionRequest),
    "responses": ({"input": "hi"}, ResponsesRequest),
    "anthropic": ({"messages": USER}, MessagesRequest),
}


@pytest.mark.parametrize("api", sorted(BODIES))
def test_filled_bodies_validate_and_the_input_is_untouched(api: str) -> None:
    body, model = BODIES[api]
    before = copy.deepcopy(body)
    filled = apply_defaults(api, body, DEFAULTS)
    assert body == before and filled is not body
    request = model.model_validate(filled)
    assert request.temperature == 0.3 and request.top_k == 7 and request.seed == 5
    assert request.repetition_penalty == 1.1


def test_max_tokens_per_api() -> None:
    assert apply_defaults("chat", {"messages": USER}, DEFAULTS)["max_tokens"] == 50
    assert apply_defaults("completions", {"prompt": "x"}, DEFAULTS)["max_tokens"] == 50
    native = apply_defaults("native", {"prompt": "x"}, DEFAULTS)
    assert native["n_predict"] == 50 and "max_tokens" not in native
    responses = apply_defaults("responses", {"input": "x"}, DEFAULTS)
    assert responses["max_output_tokens"] == 50 and "max_tokens" not in responses
    assert apply_defaults("anthropic", {"messages": USER}, DEFAULTS)["max_tokens"] == 50


@pytest.mark.parametrize("api, body", [
    ("chat", {"max_completion_tokens": 9}),
    ("chat", {"n_predict": 9}),
    ("chat", {"max_tokens": 9}),
    ("completions", {"n_predict": 9}),
    ("native", {"max_tokens": 9}),
    ("responses", {"max_output_tokens": 9}),
    ("anthropic", {"max_tokens": 9}),
])
def test_the_body_output_cap_wins_in_any_spelling(api: str, body: dict) -> None:
    filled = apply_defaults(api, body, DEFAULTS)
    assert 50 not in (filled.get("max_tokens"), filled.get("n_predict"), filled.get("max_output_tokens"))


def test_explicit_fields_win_and_null_counts_as_absent() -> None:
    filled = apply_defaults("chat", {"messages": USER, "temperature": 0.9, "top_k": None, "repeat_penalty": 1.0},
                            DEFAULTS)
    assert filled["temperature"] == 0.9 and filled["top_k"] == 7
    assert "repetition_penalty" not in filled and filled["repeat_penalty"] == 1.0  # one setting, two names


def test_stop_and_budget_per_api() -> None:
    anthropic = apply_defaults("anthropic", {"messages": USER}, DEFAULTS)
    assert anthropic["stop_sequences"] == ["END"] and "stop" not in anthropic
    assert "thinking_budget" not in anthropic
    assert apply_defaults("anthropic", {"messages": USER, "stop_sequences": ["X"]}, DEFAULTS)["stop_sequences"] == ["X"]
    one = RequestDefaults(sampling={"stop": "END"})
    assert apply_defaults("anthropic", {}, one)["stop_sequences"] == ["END"]
    assert apply_defaults("chat", {}, DEFAULTS)["stop"] == ["END"]
    for api in ("completions", "native"):
        assert "thinking_budget" not in apply_defaults(api, {}, DEFAULTS)
    assert apply_defaults("chat", {}, DEFAULTS)["thinking_budget"] == 32
    assert "thinking_budget" not in apply_defaults("chat", {"thinking_budget_tokens": 4}, DEFAULTS)


def test_a_filled_list_is_a_copy() -> None:
    filled = apply_defaults("chat", {}, DEFAULTS)
    filled["stop"].append("more")
    assert DEFAULTS.sampling["stop"] == ["END"]


def test_system_prompt_per_api() -> None:
    chat = apply_defaults("chat", {"messages": USER}, DEFAULTS)
    assert chat["messages"] == [{"role": "system", "content": "Be terse."}, *USER]
    for role in ("system", "developer"):
        own = [{"role": role, "content": "mine"}, *USER]
        assert apply_defaults("chat", {"messages": own}, DEFAULTS)["messages"] == own
    assert apply_defaults("anthropic", {"messages": USER}, DEFAULTS)["system"] == "Be terse."
    assert apply_defaults("anthropic", {"messages": USER, "system": "mine"}, DEFAULTS)["system"] == "mine"
    assert apply_defaults("responses", {"input": "x"}, DEFAULTS)["instructions"] == "Be terse."
    assert apply_defaults("responses", {"input": "x", "instructions": "mine"}, DEFAULTS)["instructions"] == "mine"
    items = [{"role": "developer", "content": "mine"}, {"role": "user", "content": "x"}]
    assert "instructions" not in apply_defaults("responses", {"input": items}, DEFAULTS)
    for api in ("completions", "native"):
        filled = apply_defaults(api, {"prompt": "x"}, DEFAULTS)
        assert "system" not in filled and "messages" not in filled and "instructions" not in filled
    assert apply_defaults("chat", {"messages": "bad"}, DEFAULTS)["messages"] == "bad"  # the API's 400 to give


def test_template_kwargs_merge_under_the_request() -> None:
    mine = apply_defaults("responses", {"chat_template_kwargs": {"x": 2, "y": 3}}, DEFAULTS)
    assert mine["chat_template_kwargs"] == {"enable_thinking": False, "reasoning_effort": "low", "x": 2, "y": 3}
    nested = apply_defaults("anthropic", {"extra_body": {"chat_template_kwargs": {"x": 2}}}, DEFAULTS)
    assert nested["extra_body"]["chat_template_kwargs"]["x"] == 2 and "chat_template_kwargs" not in nested
    assert nested["extra_body"]["chat_template_kwargs"]["reasoning_effort"] == "low"
    preserve = apply_defaults("chat", {"preserve_thinking": True}, DEFAULTS)
    assert preserve["chat_template_kwargs"]["preserve_thinking"] is True
    assert preserve["chat_template_kwargs"]["x"] == 1
    assert apply_defaults("chat", {"chat_template_kwargs": "bad"}, DEFAULTS)["chat_template_kwargs"] == "bad"
    for api in ("completions", "native"):
        assert "chat_template_kwargs" not in apply_defaults(api, {}, DEFAULTS)


def test_chat_switches_in_the_body_keep_the_profiles_out_of_the_way() -> None:
    kwargs = apply_defaults("chat", {"enable_thinking": True, "reasoning_effort": "high"},
                            DEFAULTS)["chat_template_kwargs"]
    assert kwargs == {"x": 1}
    kwargs = apply_defaults("chat", {"reasoning": {"effort": "high"}}, DEFAULTS)["chat_template_kwargs"]
    assert kwargs == {"enable_thinking": False, "x": 1}


def test_empty_defaults_change_nothing() -> None:
    body = {"messages": USER, "temperature": 0.1}
    assert apply_defaults("chat", body, RequestDefaults()) == body


def test_an_unknown_api() -> None:
    with pytest.raises(ValueError, match="unknown API"):
        apply_defaults("grpc", {}, DEFAULTS)


def test_no_system_message_into_an_empty_conversation() -> None:
    assert apply_defaults("chat", {"messages": []}, DEFAULTS)["messages"] == []
