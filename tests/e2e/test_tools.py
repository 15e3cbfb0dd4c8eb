"""Tool calling end to end on Qwen2.5-Coder-0.5B (Hermes <tool_call> format)."""

from __future__ import annotations

import json

import pytest

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the current time in a timezone",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
    },
}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
FORCED = ["required", {"type": "function", "function": {"name": "get_weather"}}]


def _create(client, **kwargs):
    return client.chat.completions.create(model="qwen", messages=kwargs.pop("messages", ASK), temperature=0,
                                          max_tokens=kwargs.pop("max_tokens", 80), **kwargs)


def test_auto_call_from_the_model(qwen_client):
    reply = _create(qwen_client, tools=[WEATHER, TIME])
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id
    assert json.loads(call.function.arguments)["city"] == "Paris"
    assert "<tool_call>" not in (choice.message.content or "") and "get_weather" not in (choice.message.content or "")


@pytest.mark.parametrize("tool_choice", FORCED)
def test_forced_choice_always_calls(qwen_client, tool_choice):
    messages = [{"role": "user", "content": "Hello! How are you today?"}]  # nothing asks for a tool
    reply = _create(qwen_client, messages=messages, tools=[WEATHER, TIME], tool_choice=tool_choice)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    if isinstance(tool_choice, dict):
        assert call.function.name == "get_weather"
    assert call.function.name in ("get_weather", "get_time")
    assert isinstance(json.loads(call.function.arguments), dict)


@pytest.mark.parametrize("tool_choice", [None, *FORCED])
def test_streamed_call_matches_the_spec_shape(qwen_client, tool_choice):
    extra = {"tool_choice": tool_choice} if tool_choice else {}
    whole = _create(qwen_client, tools=[WEATHER, TIME], extra_body={"cache_prompt": False}, **extra)
    chunks = list(_create(qwen_client, tools=[WEATHER, TIME], stream=True, extra_body={"cache_prompt": False},
                          **extra))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    content = "".join(d.content or "" for d in deltas)
    assert "<tool_call>" not in content and "</tool_call>" not in content
    call_deltas = [tc for d in deltas for tc in (d.tool_calls or [])]
    first = call_deltas[0]
    assert first.index == 0 and first.id and first.type == "function"
    assert first.function.name == "get_weather" and first.function.arguments == ""
    arguments = "".join(tc.function.arguments or "" for tc in call_deltas[1:])
    assert arguments == whole.choices[0].message.tool_calls[0].function.arguments
    assert json.loads(arguments)["city"]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_a_call_cut_off_by_max_tokens_finishes_with_length(qwen_client):
    """"length", as llama-server and OpenAI say (it was "tool_calls"): the cut call's
    arguments are no JSON to run."""
    kwargs = {"tools": [WEATHER], "tool_choice": "required", "max_tokens": 15}
    reply = _create(qwen_client, **kwargs)
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 15
    chunks = list(_create(qwen_client, stream=True, **kwargs))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_tool_result_round_trip(qwen_client):
    first = _create(qwen_client, tools=[WEATHER], tool_choice="required")
    call = first.choices[0].message.tool_calls[0]
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": call.function.name,
                                                             "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 21, "sky": "sunny"})},
    ]
    # this 0.5B model calls the tool again when it may; "none" asks it for the answer
    final = _create(qwen_client, messages=messages, tools=[WEATHER], tool_choice="none", max_tokens=60)
    assert final.choices[0].finish_reason == "stop"
    assert not final.choices[0].message.tool_calls
    assert final.choices[0].message.content
    assert "21" in final.choices[0].message.content or "sunny" in final.choices[0].message.content.lower()


def test_tool_choice_none_renders_no_tools(qwen):
    with qwen.client() as client:
        def prompt_tokens(**extra):
            body = {"messages": ASK, "max_tokens": 1, **extra}
            return client.post("/v1/chat/completions", json=body).json()["usage"]["prompt_tokens"]

        bare = prompt_tokens()
        assert prompt_tokens(tools=[WEATHER], tool_choice="none") == bare
        assert prompt_tokens(tools=[]) == bare
        assert prompt_tokens(tools=[WEATHER]) > bare + 20


@pytest.mark.parametrize("body, needle", [
    ({"tool_choice": "required"}, "required"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "nope"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": ""}}}, "empty"),
    ({"tools": [WEATHER], "tool_choice": {"type": "retrieval", "function": {"name": "get_weather"}}}, "function"),
    ({"tools": [WEATHER], "tool_choice": "required",
      "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
     "response_format"),
])
def test_tool_choice_errors(qwen, body, needle):
    with qwen.client() as client:
        response = client.post("/v1/chat/completions", json={"messages": ASK, **body})
    assert response.status_code == 400
    assert needle in response.json()["error"]["message"]


def test_logprobs_keep_one_chunk_per_token_through_tool_markup(qwen):
    with qwen.client() as client, client.stream("POST", "/v1/chat/completions", json={
        "messages": ASK, "tools": [WEATHER], "tool_choice": "required", "temperature": 0, "max_tokens": 80,
        "logprobs": True, "stream": True, "stream_options": {"include_usage": True}}) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    with_logprobs = [c for c in chunks if c["choices"] and c["choices"][0].get("logprobs")]
    usage = chunks[-1]["usage"]
    assert len(with_logprobs) == usage["completion_tokens"]
    suppressed = [c for c in with_logprobs if c["choices"][0]["delta"] == {"content": ""}]
    assert suppressed  # the <tool_call> markup tokens still carried their logprobs


# the model continues an assistant message that already holds one call and began a second
TWO_CALLS = [{"role": "user", "content": "What's the weather in Paris and in Tokyo?"},
             {"role": "assistant", "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                                              '</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": '
                                              '{"city": "'}]


def test_parallel_tool_calls_false_gives_one_call_and_stops_the_generation(qwen):
    def ask(client, stream, **extra):
        # each request alone (cache_prompt false): drafted from the earlier identical reply in
        # the server's traffic, the whole continuation would come in one verify round, ahead of
        # the stop, and the token counts below could not tell where the generation ended
        body = {"messages": TWO_CALLS, "tools": [WEATHER, TIME], "temperature": 0, "max_tokens": 40,
                "cache_prompt": False, **extra}
        if not stream:
            response = client.post("/v1/chat/completions", json=body)
            assert response.status_code == 200, response.text
            answer = response.json()
            choice = answer["choices"][0]
            calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])["city"])
                     for c in choice["message"].get("tool_calls") or []]
            return calls, choice["message"]["content"], choice["finish_reason"], answer["usage"]["completion_tokens"]
        response = client.post("/v1/chat/completions", json={**body, "stream": True,
                                                             "stream_options": {"include_usage": True}})
        events = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
        deltas = [c for e in events for c in e["choices"]]
        arguments: dict[int, str] = {}
        names: dict[int, str] = {}
        for d in deltas:
            for call in d["delta"].get("tool_calls") or []:
                names[call["index"]] = names.get(call["index"], "") + (call["function"].get("name") or "")
                arguments[call["index"]] = arguments.get(call["index"], "") + call["function"]["arguments"]
        calls = [(names[i], json.loads(arguments[i])["city"]) for i in sorted(arguments)]
        content = "".join(d["delta"].get("content") or "" for d in deltas)
        finish = [d["finish_reason"] for d in deltas if d["finish_reason"]]
        return calls, content, finish[-1], events[-1]["usage"]["completion_tokens"]

    with qwen.client() as client:
        for stream in (False, True):
            both = ask(client, stream)
            one = ask(client, stream, parallel_tool_calls=False)
            assert both[0] == [("get_weather", "Paris"), ("get_weather", "Tokyo")], both
            assert one[0] == [("get_weather", "Paris")], one
            assert one[1] == both[1] == ""  # nothing of the dropped call leaks into the content
            assert one[2] == both[2] == "tool_calls"
            assert one[3] < both[3]  # the generation ended at the second call instead of writing it
            assert ask(client, stream, parallel_tool_calls=True)[0] == both[0]
        bad = client.post("/v1/chat/completions", json={"messages": ASK, "tools": [WEATHER],
                                                        "parallel_tool_calls": "no"})
    assert bad.status_code == 400 and "parallel_tool_calls" in bad.json()["error"]["message"]


def test_legacy_functions_answer_with_function_call(qwen):
    """OpenAI's legacy `functions` / `function_call`: one call, as `message.function_call`
    (streamed as `delta.function_call`), finish_reason "function_call"; a history with
    a legacy call and its `function` result renders as a tool call and its result."""
    body = {"messages": ASK, "functions": [WEATHER["function"], TIME["function"]],
            "function_call": {"name": "get_weather"}, "temperature": 0, "max_tokens": 60}
    with qwen.client() as client:
        whole = client.post("/v1/chat/completions", json=body).json()
        streamed = client.post("/v1/chat/completions", json={**body, "stream": True})
        auto = client.post("/v1/chat/completions", json={**body, "function_call": "auto"}).json()
        history = [*ASK, {"role": "assistant", "content": None,
                          "function_call": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                   {"role": "function", "name": "get_weather", "content": "Sunny and 24 degrees"}]
        prompt = client.post("/apply-template", json={"messages": history, "functions": [WEATHER["function"]]})
        answered = client.post("/v1/chat/completions", json={"messages": history, "functions": [WEATHER["function"]],
                                                             "temperature": 0, "max_tokens": 30}).json()
        errors = [client.post("/v1/chat/completions", json={"messages": ASK, **extra}) for extra in (
            {"functions": [WEATHER["function"]], "tools": [WEATHER]},
            {"function_call": "auto"},
            {"functions": [WEATHER["function"]], "function_call": "required"},
        )] + [client.post("/v1/chat/completions", json={"messages": [*ASK, {"role": "function", "content": "x"}],
                                                        "functions": [WEATHER["function"]]})]
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "function_call" and "tool_calls" not in choice["message"]
    call = choice["message"]["function_call"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"])["city"] == "Paris"
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    deltas = [c["delta"] for e in events for c in e["choices"]]
    assert not any("tool_calls" in d for d in deltas)
    pieces = [d["function_call"] for d in deltas if "function_call" in d]
    assert pieces[0]["name"] == "get_weather"
    assert "".join(p["arguments"] for p in pieces) == call["arguments"]
    assert [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]] == ["function_call"]
    assert auto["choices"][0]["message"]["function_call"]["name"] == "get_weather"  # the model calls it itself
    assert prompt.status_code == 200
    rendered = prompt.json()["prompt"]
    assert '"city": "Paris"' in rendered and "<tool_response>\nSunny and 24 degrees" in rendered
    assert answered["choices"][0]["finish_reason"] in ("stop", "function_call", "length")  # what the model does next
    assert "tool_calls" not in answered["choices"][0]["message"]
    for response in errors:
        assert response.status_code == 400, response.text
