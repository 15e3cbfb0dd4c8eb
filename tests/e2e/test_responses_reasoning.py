"""Reasoning items on a tiny random-weight model with a Qwen3 template whose
generation prompt opens <think>: the reasoning item streams ahead of the message,
and the reasoning echo renders a turn replayed without it as it was generated."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.think_model import qwen3_template, write_think_model
from tests.server_process import ServerProcess

# random weights echo the last prompt token greedily: sample, seeded, and close the
# reasoning after 4 tokens so content follows
SAMPLED = {"temperature": 1.0, "seed": 7, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "ignore_eos": True,
           "thinking_budget_tokens": 4, "max_output_tokens": 12}


def _opening_template(folder) -> str:
    opening = qwen3_template().replace(
        "{%- if enable_thinking is defined and enable_thinking is false %}",
        "{%- if not (enable_thinking is defined and enable_thinking is false) %}\n"
        "        {{- '<think>\\n' }}\n    {%- else %}",
    )
    assert opening != qwen3_template()
    path = folder / "opening.jinja"
    path.write_text(opening)
    return str(path)


def _server(folder, *args: str, env: dict | None = None) -> ServerProcess:
    model = folder / "think.gguf"
    if not model.exists():
        write_think_model(model)
    return ServerProcess("-c", "1024", "-np", "1", "--chat-template", _opening_template(folder), *args,
                         model=str(model), env=env).wait_ready()


@pytest.fixture(scope="module")
def think(tmp_path_factory):
    proc = _server(tmp_path_factory.mktemp("think-responses"))
    try:
        yield proc
    finally:
        proc.stop()


def _events(client, **body) -> list[dict]:
    with client.stream("POST", "/v1/responses", json={"input": "Hello there", "stream": True, **SAMPLED,
                                                       **body}) as response:
        assert response.status_code == 200
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def test_reasoning_item_streams_ahead_of_the_message(think):
    with think.client() as client:
        events = _events(client)
        whole = client.post("/v1/responses", json={"input": "Hello there", **SAMPLED}).json()
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    types = [e["type"] for e in events]
    first_text = types.index("response.output_text.delta")
    assert "response.reasoning_text.delta" in types[:first_text]
    assert types.index("response.reasoning_text.done") < first_text
    reasoning = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert final["output"][0]["content"] == [{"type": "reasoning_text", "text": reasoning}]
    assert "<think>" not in final["output"][1]["content"][0]["text"]
    assert [item["type"] for item in whole["output"]] == ["reasoning", "message"]
    assert whole["output"][0]["content"] == final["output"][0]["content"]
    assert whole["usage"]["output_tokens_details"]["reasoning_tokens"] > 0


def _count(client, items) -> int:
    return client.post("/v1/responses/input_tokens", json={"input": items}).json()["input_tokens"]


def test_reasoning_echo_restores_a_turn_replayed_without_its_reasoning(think, tmp_path):
    ask = {"role": "user", "content": "Hello there"}
    with think.client() as client:
        output = client.post("/v1/responses", json={"input": [ask], **SAMPLED}).json()["output"]
        reasoning, message = output
        with_reasoning = _count(client, [ask, reasoning, message])
        echoed = _count(client, [ask, message])
        edited = {**message, "content": [{**message["content"][0], "text": message["content"][0]["text"] + "!"}]}
        unknown = _count(client, [ask, edited])
    assert echoed == with_reasoning and unknown < echoed
    # MLXCEL_REASONING_ECHO_MAX_BYTES=0 turns the echo off
    off = _server(tmp_path, env={"MLXCEL_REASONING_ECHO_MAX_BYTES": "0"})
    try:
        with off.client() as client:
            output = client.post("/v1/responses", json={"input": [ask], **SAMPLED}).json()["output"]
            assert _count(client, [ask, output[1]]) < _count(client, [ask, *output])
    finally:
        off.stop()
