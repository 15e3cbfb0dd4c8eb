"""Reasoning on a tiny random-weight model with a real Qwen3 thinking template whose
generation prompt opens <think> (as Qwen3.5+/R1-style templates do). The weights are
random: what is tested is the template, the split, the budget and the streaming."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.think_model import qwen3_template, write_think_model
from tests.server_process import ServerProcess

HI = [{"role": "user", "content": "Hello there"}]
# random weights echo the last prompt token greedily ("\n" here): sample, seeded, instead
SAMPLED = {"temperature": 1.0, "seed": 7, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "ignore_eos": True}


REFUSING = "{%- if messages[0].content == 'please refuse' %}{{ raise_exception('refused by the template') }}{%- endif %}\n"


@pytest.fixture(scope="module")
def think(tmp_path_factory):
    folder = tmp_path_factory.mktemp("think")
    model = write_think_model(folder / "think.gguf")
    opening = REFUSING + qwen3_template().replace(
        "{%- if enable_thinking is defined and enable_thinking is false %}",
        "{%- if not (enable_thinking is defined and enable_thinking is false) %}\n"
        "        {{- '<think>\\n' }}\n    {%- else %}",
    )
    assert opening != qwen3_template()
    (folder / "opening.jinja").write_text(opening)
    proc = ServerProcess("-c", "1024", "-np", "2", "--chat-template", str(folder / "opening.jinja"),
                         model=str(model))
    try:
        proc.folder = folder
        yield proc.wait_ready()
    finally:
        proc.stop()


def test_server_wide_template_kwargs_merge_under_the_request(think):
    """--chat-template-kwargs (here through its environment variable) sets defaults a
    request's chat_template_kwargs override key by key."""
    proc = ServerProcess("-c", "512", "-np", "1", "--chat-template-file", str(think.folder / "opening.jinja"),
                         model=str(think.folder / "think.gguf"),
                         env={"LLAMA_ARG_CHAT_TEMPLATE_KWARGS": '{"enable_thinking": false, "unrelated": 1}'})
    try:
        proc.wait_ready()
        with proc.client() as client:
            default = _chat(client, max_tokens=4)
            overridden = _chat(client, max_tokens=4, chat_template_kwargs={"enable_thinking": True})
    finally:
        proc.stop()
    assert "reasoning_content" not in default["choices"][0]["message"]
    assert overridden["choices"][0]["message"].get("reasoning_content")
    assert overridden["usage"]["prompt_tokens"] < default["usage"]["prompt_tokens"]


def _chat(client, **body):
    response = client.post("/v1/chat/completions", json={"messages": HI, **SAMPLED, **body})
    assert response.status_code == 200, response.text
    return response.json()


def _stream(client, **body):
    with client.stream("POST", "/v1/chat/completions", json={
        "messages": HI, **SAMPLED, "stream": True, **body
    }) as response:
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]


def test_reasoning_goes_to_reasoning_content(think):
    with think.client() as client:
        body = _chat(client, max_tokens=12)
        chunks = _stream(client, max_tokens=12, stream_options={"include_usage": True})
    message = body["choices"][0]["message"]
    assert message["content"] == "" and message["reasoning_content"]
    assert message["reasoning_only"] is True
    assert body["choices"][0]["finish_reason"] == "length"
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == message["reasoning_content"]
    assert not any(d.get("content") for d in deltas)
    assert deltas[-1] == {"reasoning_only": True}
    # every generated token was reasoning (a re-tokenized count of random tokens' text would differ)
    assert body["usage"]["completion_tokens_details"]["reasoning_tokens"] == body["usage"]["completion_tokens"] == 12
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 12


@pytest.mark.parametrize("shape", [
    {"chat_template_kwargs": {"enable_thinking": False}},
    {"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
    {"enable_thinking": False},
    {"reasoning_effort": "none"},
])
def test_thinking_can_be_turned_off(think, shape):
    with think.client() as client:
        on = _chat(client, max_tokens=6)
        off = _chat(client, max_tokens=6, **shape)
    # the closed "<think>\n\n</think>\n\n" block replaces the open one
    assert off["usage"]["prompt_tokens"] > on["usage"]["prompt_tokens"]
    message = off["choices"][0]["message"]
    assert message["content"] and "reasoning_content" not in message and "reasoning_only" not in message
    assert off["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


@pytest.mark.parametrize("field", ["thinking_budget", "thinking_budget_tokens"])
def test_thinking_budget_closes_reasoning(think, field):
    with think.client() as client:
        body = _chat(client, max_tokens=16, **{field: 4})
        chunks = _stream(client, max_tokens=16, **{field: 4})
        zero = _chat(client, max_tokens=8, **{field: 0})
    message = body["choices"][0]["message"]
    assert message["reasoning_content"] and message["content"]
    assert "<think>" not in message["content"] and "</think>" not in message["content"]
    # the budget's 4 tokens and the forced end of the block, not the content after it
    assert 4 < body["usage"]["completion_tokens_details"]["reasoning_tokens"] < body["usage"]["completion_tokens"]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == message["reasoning_content"]
    assert "".join(d.get("content", "") for d in deltas) == message["content"]
    assert "reasoning_content" not in zero["choices"][0]["message"]
    assert zero["choices"][0]["message"]["content"]


def test_template_that_raises_is_a_400(think):
    with think.client() as client:
        response = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "please refuse"}]})
        assert response.status_code == 400
        assert response.json()["error"]["message"] == "refused by the template"
        assert client.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 1}).status_code == 200


def test_preserve_thinking_keeps_prior_reasoning(http):
    """On SmolLM2 (ChatML): prior <think> blocks are stripped unless preserve_thinking."""
    history = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "<think>The user asks about France; its capital is Paris.</think>Paris."},
        {"role": "user", "content": "And of Spain?"},
    ]

    def prompt_tokens(**extra):
        body = {"messages": history, "max_tokens": 1, **extra}
        return http.post("/v1/chat/completions", json=body).json()["usage"]["prompt_tokens"]

    stripped = prompt_tokens()
    for shape in ({"chat_template_kwargs": {"preserve_thinking": True}},
                  {"extra_body": {"chat_template_kwargs": {"preserve_thinking": True}}},
                  {"extra_body": {"preserve_thinking": True}}):
        assert prompt_tokens(**shape) > stripped + 10
    assert prompt_tokens(chat_template_kwargs={"preserve_thinking": False}) == stripped


def test_a_request_can_leave_its_thoughts_in_the_content(think):
    """reasoning_format "none" (llama-server's): no extraction, the generated text is
    the content as it came; the same seed's reasoning is in it."""
    with think.client() as client:
        split = _chat(client, max_tokens=12)["choices"][0]["message"]
        raw = _chat(client, max_tokens=12, reasoning_format="none")["choices"][0]["message"]
        chunks = _stream(client, max_tokens=12, reasoning_format="none")
        bad = client.post("/v1/chat/completions", json={"messages": HI, "reasoning_format": "thoughts"})
        assert _chat(client, max_tokens=2)["choices"][0]["message"]  # still serving
    assert "reasoning_content" not in raw and "reasoning_only" not in raw
    assert split["reasoning_content"].strip() in raw["content"]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert not any(d.get("reasoning_content") for d in deltas)
    assert "".join(d.get("content", "") for d in deltas) == raw["content"]
    assert bad.status_code == 400 and "reasoning_format" in bad.text


def test_the_budget_message_goes_before_the_forced_end_of_thinking(think):
    with think.client() as client:
        body = _chat(client, max_tokens=24, reasoning_budget_tokens=4, reasoning_budget_message=" Enough, answering.")
    message = body["choices"][0]["message"]
    assert message["reasoning_content"].endswith("Enough, answering.")
    assert message["content"] and "Enough" not in message["content"]


def test_server_wide_reasoning_flags(think):
    """--reasoning-format, --reasoning-budget and its message are the defaults a request
    overrides; -rea off turns the template's thinking off."""
    proc = ServerProcess("-c", "512", "-np", "1", "--chat-template-file", str(think.folder / "opening.jinja"),
                         "--reasoning-format", "none", "--reasoning-budget", "4",
                         "--reasoning-budget-message", " Time to answer.", model=str(think.folder / "think.gguf"))
    off = ServerProcess("-c", "512", "-np", "1", "--chat-template-file", str(think.folder / "opening.jinja"),
                        "-rea", "off", model=str(think.folder / "think.gguf"))
    try:
        proc.wait_ready(), off.wait_ready()
        with proc.client() as client:
            default = _chat(client, max_tokens=24)["choices"][0]["message"]
            split = _chat(client, max_tokens=24, reasoning_format="deepseek")["choices"][0]["message"]
            unbudgeted = _chat(client, max_tokens=8, reasoning_format="auto", thinking_budget=100)
            props = client.get("/props").json()
        with off.client() as client:
            rendered = client.post("/apply-template", json={"messages": HI}).json()["prompt"]
            turned_on = client.post("/apply-template", json={
                "messages": HI, "chat_template_kwargs": {"enable_thinking": True}}).json()["prompt"]
    finally:
        proc.stop(), off.stop()
    assert "reasoning_content" not in default
    assert "Time to answer.</think>" in default["content"]  # the forced end, left in the content
    assert split["reasoning_content"].endswith("Time to answer.") and "</think>" not in split["content"]
    assert unbudgeted["choices"][0]["message"]["reasoning_only"] is True  # 100 tokens: no forced end in 8
    assert props["default_generation_settings"]["reasoning_format"] == "none"
    assert rendered.endswith("<think>\n\n</think>\n\n") and turned_on.endswith("<think>\n")


def test_skip_chat_parsing_leaves_everything_in_the_content(think):
    proc = ServerProcess("-c", "512", "-np", "1", "--chat-template-file", str(think.folder / "opening.jinja"),
                         "--skip-chat-parsing", model=str(think.folder / "think.gguf"))
    try:
        proc.wait_ready()
        with proc.client() as client:
            raw = _chat(client, max_tokens=12)["choices"][0]["message"]
    finally:
        proc.stop()
    with think.client() as client:
        split = _chat(client, max_tokens=12)["choices"][0]["message"]
    assert "reasoning_content" not in raw and split["reasoning_content"].strip() in raw["content"]


def test_a_control_request_ends_the_reasoning_of_a_running_stream(think):
    """llama-server's POST /v1/chat/completions/control {"id", "action": "reasoning_end"}:
    a stream armed with reasoning_control leaves its reasoning at once and answers."""
    body = {"messages": HI, **SAMPLED, "stream": True, "max_tokens": 600, "reasoning_control": True}
    with think.client() as client:
        with client.stream("POST", "/v1/chat/completions", json=body) as response:
            lines = (line for line in response.iter_lines() if line.startswith("data: {"))
            chunks = []
            for line in lines:  # a few reasoning tokens first
                chunks.append(json.loads(line[6:]))
                if sum(bool(c["choices"] and c["choices"][0]["delta"].get("reasoning_content")) for c in chunks) >= 3:
                    break
            completion_id = chunks[0]["id"]
            answer = client.post("/v1/chat/completions/control", json={"id": completion_id, "action": "reasoning_end"})
            chunks += [json.loads(line[6:]) for line in lines]
        finished = client.post("/v1/chat/completions/control", json={"id": completion_id, "action": "reasoning_end"})
    assert answer.status_code == 200 and answer.json() == {"success": True}, answer.text
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    reasoning_before = next(i for i, d in enumerate(deltas) if d.get("content"))
    content = "".join(d.get("content", "") for d in deltas)
    # the reasoning ended within a few tokens of the control, long before the 600-token cap
    assert 3 <= reasoning_before < 40 and content, deltas[:50]
    assert not any(d.get("reasoning_content") for d in deltas[reasoning_before:])
    assert finished.json() == {"success": False, "message": "no active completion for this id"}


def test_a_control_request_says_why_it_did_nothing(http):
    """On the shared SmolLM2 server: a running completion that did not arm reasoning
    control, an unknown id, and malformed control requests."""
    body = {"messages": HI, "stream": True, "max_tokens": 400, "ignore_eos": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()  # held: a lines iterator freed would close the stream, and end the completion
        first = json.loads(next(line for line in lines if line.startswith("data: {"))[6:])
        unarmed = http.post("/v1/chat/completions/control", json={"id": first["id"], "action": "reasoning_end"})
    unknown = http.post("/v1/chat/completions/control", json={"id": "chatcmpl-nope", "action": "reasoning_end"})
    bad = [http.post("/v1/chat/completions/control", json=payload) for payload in (
        {"action": "reasoning_end"}, {"id": "", "action": "reasoning_end"}, {"id": first["id"], "action": "pause"},
        {"id": first["id"]})]
    malformed = http.post("/v1/chat/completions/control", content=b"{", headers={"content-type": "application/json"})
    assert unarmed.json() == {"success": False, "message": "reasoning control not enabled for this completion"}
    assert unknown.json() == {"success": False, "message": "no active completion for this id"}
    assert [r.status_code for r in bad] == [400, 400, 400, 400] and malformed.status_code == 400
    assert bad[0].json()["error"]["message"] == "missing completion id"
    assert bad[2].json()["error"]["message"] == "unknown control action"
