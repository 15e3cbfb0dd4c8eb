"""The Anthropic Messages API end to end with the official `anthropic` SDK: text on
SmolLM2, tools on Qwen2.5-Coder, thinking on a random-weight think-template model,
token counting and every error shape."""

from __future__ import annotations

import json
import threading

import anthropic
import httpx
import pytest

from tests.fixtures.think_model import qwen3_template, write_think_model
from tests.server_process import ServerProcess

HELLO = [{"role": "user", "content": "Say hello to the sea."}]
WEATHER = {
    "name": "get_weather",
    "description": "Get the current weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name"}},
                     "required": ["city"]},
}
TIME = {"name": "get_time", "description": "Get the current time in a timezone",
        "input_schema": {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}}
WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
# recent SDKs take temperature, top_p and top_k in extra_body only (it works with every SDK)
GREEDY = {"extra_body": {"temperature": 0}}
GREEDY_NO_CACHE = {"extra_body": {"temperature": 0, "cache_prompt": False}}
KEY = "sk-anthropic-test"


def _client(proc, **kwargs) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proc.base_url, api_key=kwargs.pop("api_key", "unused"), max_retries=0,
                               timeout=300, **kwargs)


@pytest.fixture
def claude(server):
    return _client(server)


@pytest.fixture
def qwen_claude(qwen):
    return _client(qwen)


def _error(response: httpx.Response, status: int, kind: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == kind
    return body["error"]["message"]


# --- text on SmolLM2 -----------------------------------------------------------

def test_create_returns_a_message(claude):
    message = claude.messages.create(model="smollm2", max_tokens=12, messages=HELLO, system="Be terse.",
                                     metadata={"user_id": "u-1"}, service_tier="auto",
                                     extra_body={"temperature": 0, "container": "ignored", "some_future_field": 1},
                                     extra_headers={"X-Priority": "high"})
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == "smollm2-135m-instruct"
    (block,) = message.content
    assert block.type == "text" and block.text
    assert message.stop_reason in ("end_turn", "max_tokens") and message.stop_sequence is None
    assert 0 < message.usage.output_tokens <= 12 and message.usage.input_tokens > 0
    cut = claude.messages.create(model="m", max_tokens=2, messages=HELLO)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 2


def test_system_blocks_and_multi_turn_content_blocks(claude):
    message = claude.messages.create(
        model="m", max_tokens=8,
        system=[{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "Hello!"}]},
                  {"role": "user", "content": "Name a colour."}],
        extra_body={"temperature": 0.7, "top_p": 0.9, "top_k": 20})
    assert message.content[0].text and message.usage.output_tokens <= 8


def test_stream_matches_create(claude, http):
    kwargs = {"model": "m", "max_tokens": 24, "messages": HELLO, **GREEDY_NO_CACHE}
    whole = claude.messages.create(**kwargs)
    with claude.messages.stream(**kwargs) as stream:
        streamed_text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed_text == whole.content[0].text == final.content[0].text
    assert final.stop_reason == whole.stop_reason and final.usage.output_tokens == whole.usage.output_tokens
    assert final.usage.input_tokens == whole.usage.input_tokens
    with http.stream("POST", "/v1/messages", json={**kwargs, "stream": True},
                     headers={"anthropic-version": "2023-06-01"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    frames = [frame.split("\n") for frame in text.strip().split("\n\n")]
    names = [lines[0].removeprefix("event: ") for lines in frames]
    assert all(json.loads(lines[1].removeprefix("data: "))["type"] == name for name, lines in zip(names, frames))
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}


def test_stop_sequences(claude):
    kwargs = {"model": "m", "max_tokens": 30, "messages": HELLO, **GREEDY_NO_CACHE}
    free = claude.messages.create(**kwargs).content[0].text
    word = free.split()[len(free.split()) // 2].strip(".,!?")
    stopped = claude.messages.create(**kwargs, stop_sequences=["zzz-never", word])
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == word
    assert word not in stopped.content[0].text and free.startswith(stopped.content[0].text)
    with claude.messages.stream(**kwargs, stop_sequences=[word]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == word


def test_output_config_json_schema(claude):
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
              "additionalProperties": False}
    message = claude.messages.create(model="m", max_tokens=60, **GREEDY,
                                     messages=[{"role": "user", "content": "What is the capital of France?"}],
                                     output_config={"format": {"type": "json_schema", "schema": schema}})
    assert message.stop_reason == "end_turn"
    assert isinstance(json.loads(message.content[0].text)["answer"], str)


def test_count_tokens_equals_usage(claude):
    kwargs = {"model": "m", "system": "Be terse.",
              "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                           {"role": "user", "content": [{"type": "text", "text": "Name a colour."}]}]}
    counted = claude.messages.count_tokens(**kwargs)
    usage = claude.messages.create(max_tokens=1, **kwargs).usage
    assert counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens
    with claude.messages.stream(max_tokens=1, **kwargs) as stream:
        usage = stream.get_final_message().usage
    # the repeated prompt is served from the cache, reported as llama-server does
    assert usage.cache_read_input_tokens > 0 and usage.input_tokens + usage.cache_read_input_tokens == counted.input_tokens


def test_cache_read_input_tokens_on_a_repeated_prompt(claude):
    kwargs = {"model": "m", "max_tokens": 2, "system": "You are a poet. " * 20, "messages": HELLO}
    first = claude.messages.create(**kwargs, extra_body={"cache_prompt": False}).usage
    assert first.cache_read_input_tokens == 0
    again = claude.messages.create(**kwargs).usage
    repeat = claude.messages.create(**kwargs).usage
    assert repeat.cache_read_input_tokens > 0
    assert repeat.input_tokens + repeat.cache_read_input_tokens == first.input_tokens
    assert again.input_tokens + again.cache_read_input_tokens == first.input_tokens


def test_a_final_assistant_message_is_a_prefill(claude):
    messages = [{"role": "user", "content": "Give a JSON object with a name field for a cat."},
                {"role": "assistant", "content": '{"name": "'}]
    message = claude.messages.create(model="m", max_tokens=6, messages=messages, **GREEDY_NO_CACHE)
    assert not message.content[0].text.startswith('{"name"')
    counted = claude.messages.count_tokens(model="m", messages=messages).input_tokens
    assert message.usage.input_tokens == counted


def test_tool_result_text_parts_are_joined(claude):
    def tool_turn(content):
        return [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                                   "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": content}]}]

    parts = [{"type": "text", "text": "21 degrees"}, {"type": "text", "text": " and sunny"}]
    joined = claude.messages.count_tokens(model="m", messages=tool_turn(parts), tools=[WEATHER]).input_tokens
    whole = claude.messages.count_tokens(model="m", messages=tool_turn("21 degrees and sunny"),
                                         tools=[WEATHER]).input_tokens
    assert joined == whole  # concatenated, as llama-server does


# --- tools on Qwen2.5-Coder ----------------------------------------------------

@pytest.mark.parametrize("tool_choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
def test_forced_tool_use_streamed_and_not(qwen_claude, tool_choice):
    kwargs = {"model": "qwen", "max_tokens": 80, "messages": ASK, "tools": [WEATHER, TIME],
              "tool_choice": tool_choice, **GREEDY_NO_CACHE}
    whole = qwen_claude.messages.create(**kwargs)
    assert whole.stop_reason == "tool_use"
    call = next(b for b in whole.content if b.type == "tool_use")
    assert call.id.startswith("toolu_") and call.name == "get_weather" and call.input["city"] == "Paris"
    with qwen_claude.messages.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_message()
    fragments = [e.delta.partial_json for e in events
                 if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert len(fragments) > 1 and json.loads("".join(fragments)) == call.input
    (streamed,) = [b for b in final.content if b.type == "tool_use"]
    assert streamed.name == call.name and streamed.input == call.input and streamed.id.startswith("toolu_")
    assert final.stop_reason == "tool_use"


def test_a_tool_use_cut_off_by_max_tokens_is_max_tokens(qwen_claude):
    """stop_reason max_tokens, as in llama-server (it was tool_use): the cut block holds no
    whole input."""
    kwargs = {"model": "qwen", "max_tokens": 15, "messages": ASK, "tools": [WEATHER], "tool_choice": {"type": "any"},
              **GREEDY}
    message = qwen_claude.messages.create(**kwargs)
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 15
    with qwen_claude.messages.stream(**kwargs) as stream:
        assert stream.get_final_message().stop_reason == "max_tokens"


def test_tool_result_round_trip(qwen_claude):
    first = qwen_claude.messages.create(model="qwen", max_tokens=80, **GREEDY, messages=ASK, tools=[WEATHER],
                                        tool_choice={"type": "any"})
    call = next(b for b in first.content if b.type == "tool_use")
    messages = [
        *ASK,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                      "content": [{"type": "text",
                                                   "text": json.dumps({"temperature_c": 21, "sky": "sunny"})}]}]},
    ]
    # this 0.5B model calls the tool again when it may; "none" asks it for the answer
    final = qwen_claude.messages.create(model="qwen", max_tokens=60, **GREEDY, messages=messages,
                                        tools=[WEATHER], tool_choice={"type": "none"})
    assert final.stop_reason == "end_turn"
    assert [b.type for b in final.content] == ["text"]
    text = final.content[0].text
    assert "21" in text or "sunny" in text.lower()


def test_server_tools_are_dropped(qwen_claude):
    kwargs = {"model": "qwen", "messages": ASK}
    with_search = qwen_claude.messages.count_tokens(**kwargs, tools=[WEATHER, WEB_SEARCH])
    assert with_search.input_tokens == qwen_claude.messages.count_tokens(**kwargs, tools=[WEATHER]).input_tokens
    assert with_search.input_tokens > qwen_claude.messages.count_tokens(**kwargs).input_tokens + 20
    message = qwen_claude.messages.create(**kwargs, max_tokens=4, tools=[WEATHER, WEB_SEARCH],
                                          tool_choice={"type": "auto"})
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens == with_search.input_tokens


def test_tool_choice_errors(qwen_claude):
    with pytest.raises(anthropic.BadRequestError, match="nope"):
        qwen_claude.messages.create(model="q", max_tokens=4, messages=ASK, tools=[WEATHER],
                                    tool_choice={"type": "tool", "name": "nope"})
    with pytest.raises(anthropic.BadRequestError, match="response_format"):
        qwen_claude.messages.create(model="q", max_tokens=4, messages=ASK, tools=[WEATHER],
                                    tool_choice={"type": "any"},
                                    output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}})


# --- thinking on a think-template model ---------------------------------------

# random weights echo the last prompt token greedily: sample, seeded, instead
SAMPLED = {"extra_body": {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 7, "min_p": 0.0,
                          "ignore_eos": True}}
REFUSING = ("{%- if messages[0].content == 'please refuse' %}{{ raise_exception('refused by the template') }}"
            "{%- endif %}\n")


@pytest.fixture(scope="module")
def think(tmp_path_factory):
    folder = tmp_path_factory.mktemp("anthropic-think")
    model = write_think_model(folder / "think.gguf")
    opening = REFUSING + qwen3_template().replace(
        "{%- if enable_thinking is defined and enable_thinking is false %}",
        "{%- if not (enable_thinking is defined and enable_thinking is false) %}\n"
        "        {{- '<think>\\n' }}\n    {%- else %}",
    )
    (folder / "opening.jinja").write_text(opening)
    proc = ServerProcess("-c", "1024", "-np", "2", "--chat-template", str(folder / "opening.jinja"), model=str(model))
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def test_thinking_blocks(think):
    client = _client(think)
    kwargs = {"model": "think", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello there"}],
              "thinking": {"type": "enabled", "budget_tokens": 4}, **SAMPLED}
    whole = client.messages.create(**kwargs)
    assert [b.type for b in whole.content] == ["thinking", "text"]
    thinking, text = whole.content
    assert thinking.thinking and thinking.signature and text.text
    assert "<think>" not in text.text and "</think>" not in text.text
    with client.messages.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_message()
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert "".join(d.thinking for d in deltas if d.type == "thinking_delta") == thinking.thinking
    assert "".join(d.text for d in deltas if d.type == "text_delta") == text.text
    assert [d.type for d in deltas].count("signature_delta") == 1
    assert final.content[0].signature == thinking.signature
    assert final.model_dump()["content"] == whole.model_dump()["content"]


def test_thinking_disabled(think):
    client = _client(think)
    kwargs = {"model": "think", "messages": [{"role": "user", "content": "Hello there"}]}
    off = client.messages.create(**kwargs, max_tokens=6, thinking={"type": "disabled"}, **SAMPLED)
    assert [b.type for b in off.content] == ["text"]
    # the closed "<think>\n\n</think>\n\n" block replaces the open one
    assert (client.messages.count_tokens(**kwargs, thinking={"type": "disabled"}).input_tokens
            > client.messages.count_tokens(**kwargs, thinking={"type": "enabled", "budget_tokens": 1024}).input_tokens)


def test_template_error_is_an_anthropic_400(think):
    with think.client() as http:
        response = http.post("/v1/messages", json={"max_tokens": 4, "messages": [
            {"role": "user", "content": "please refuse"}]})
    assert _error(response, 400, "invalid_request_error") == "refused by the template"


# --- errors ------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/v1/messages", "/messages", "/v1/messages/count_tokens", "/messages/count_tokens"])
def test_malformed_json(http, path):
    response = http.post(path, content=b'{"messages": [', headers={"content-type": "application/json"})
    assert "JSON" in _error(response, 400, "invalid_request_error")


@pytest.mark.parametrize("body, needle", [
    ({"messages": HELLO}, "max_tokens"),
    ({"messages": HELLO, "max_tokens": 0}, "max_tokens"),
    ({"messages": [], "max_tokens": 4}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}], "max_tokens": 4}, "role"),
    ({"messages": HELLO, "max_tokens": 4, "temperature": -1}, "temperature"),
    ({"messages": HELLO, "max_tokens": 4, "output_config": {"format": {"type": "xml"}}}, "output_config.format.type"),
    ({"messages": HELLO, "max_tokens": 4, "output_config": {"format": {"type": "json_schema", "schema": 5}}},
     "output_config.format.schema must be an object"),
])
def test_invalid_requests(http, body, needle):
    assert needle in _error(http.post("/v1/messages", json=body), 400, "invalid_request_error")


def test_unknown_path_is_an_anthropic_404(http):
    _error(http.post("/v1/messages/batches", json={}), 404, "not_found_error")
    assert "error" in http.get("/v1/nothing-here").json()  # elsewhere the OpenAI shape stays


@pytest.mark.parametrize("content", [
    [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}],
    [{"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}],
    [{"type": "tool_result", "tool_use_id": "toolu_1",
      "content": [{"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}]}],
])
def test_image_on_a_text_model(claude, content):
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": content}])
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert "not supported" in caught.value.body["error"]["message"]


@pytest.fixture(scope="module")
def secured():
    """One slot, a one-request queue, and an API key."""
    proc = ServerProcess("-c", "1024", "-np", "1", "--queue-cap", "1", "--api-key", KEY)
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def test_api_key_in_x_api_key(secured):
    good = _client(secured, api_key=KEY)
    assert good.messages.create(model="m", max_tokens=2, messages=HELLO).usage.output_tokens == 2
    with pytest.raises(anthropic.AuthenticationError) as caught:
        _client(secured, api_key="nope").messages.create(model="m", max_tokens=2, messages=HELLO)
    assert caught.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                           "message": "Invalid API key"}}
    with secured.client() as http:
        _error(http.post("/v1/messages/count_tokens", json={"messages": HELLO}), 401, "authentication_error")
        openai_shape = http.get("/v1/models", headers={"x-api-key": "nope"})
        assert openai_shape.status_code == 401 and openai_shape.json()["error"]["type"] == "invalid_api_key"
        assert http.get("/v1/models", headers={"x-api-key": KEY}).status_code == 200


def test_full_queue_is_overloaded(secured):
    headers = {"Authorization": f"Bearer {KEY}"}
    generating, queued = threading.Event(), threading.Event()

    def hold():
        with secured.client() as http, http.stream("POST", "/completion", headers=headers, json={
                "prompt": "Once upon a time", "n_predict": 2000, "ignore_eos": True, "stream": True,
                "cache_prompt": False}) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    generating.set()
                if queued.is_set():
                    return  # closing the stream frees the slot

    holder = threading.Thread(target=hold)
    holder.start()
    assert generating.wait(60)
    waiting = threading.Thread(target=lambda: httpx.post(f"{secured.base_url}/completion", headers=headers,
                                                         json={"prompt": "queued", "n_predict": 1}, timeout=120))
    waiting.start()
    try:
        with secured.client() as http:
            for _ in range(50):  # until the queued request is in
                if http.get("/health", headers=headers).json().get("batch", {}).get("queue_depth") == 1:
                    break
                threading.Event().wait(0.1)
        client = _client(secured, api_key=KEY)
        with pytest.raises(anthropic.OverloadedError) as caught:
            client.messages.create(model="m", max_tokens=2, messages=HELLO)
        assert caught.value.body["error"]["type"] == "overloaded_error"
        with pytest.raises(anthropic.OverloadedError):
            with client.messages.stream(model="m", max_tokens=2, messages=HELLO) as stream:
                stream.get_final_message()
    finally:
        queued.set()
        holder.join(120)
        waiting.join(120)
    assert _client(secured, api_key=KEY).messages.create(model="m", max_tokens=1, messages=HELLO).content


def test_stream_disconnect_frees_the_slot(secured):
    headers = {"x-api-key": KEY}
    with secured.client() as http:
        with http.stream("POST", "/v1/messages", headers=headers, json={
                "max_tokens": 2000, "stream": True, "messages": HELLO, "ignore_eos": True}) as response:
            for line in response.iter_lines():
                if '"text_delta"' in line:
                    break
        for _ in range(100):
            if all(slot["state"] == "idle" for slot in http.get("/slots", headers=headers).json()):
                break
            threading.Event().wait(0.05)
        else:
            raise AssertionError("the slot was not freed")


def test_disable_parallel_tool_use_is_checked(qwen_claude):
    message = qwen_claude.messages.create(model="q", max_tokens=60, messages=ASK, tools=[WEATHER],
                                          tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert [b.type for b in message.content].count("tool_use") == 1
    with pytest.raises(anthropic.BadRequestError, match="disable_parallel_tool_use"):
        qwen_claude.messages.create(model="q", max_tokens=4, messages=ASK, tools=[WEATHER],
                                    tool_choice={"type": "auto", "disable_parallel_tool_use": "yes"})
