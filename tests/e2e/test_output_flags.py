"""llama-server's -sp/--special (special tokens' text in the output) and --props
(POST /props answers success), on their own server."""

from __future__ import annotations

import json

import pytest

from tests.server_process import ServerProcess

IM_START = 1  # SmolLM2's <|im_start|>: a control token, not an end of generation


@pytest.fixture(scope="module")
def special():
    proc = ServerProcess("-c", "1024", "-np", "1", "-sp", "--props")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _forced(client, **extra):
    return client.post("/completion", json={"prompt": "Hello", "n_predict": 2, "temperature": 0,
                                            "logit_bias": [[IM_START, 100]], **extra})


def test_special_tokens_are_text_with_the_flag_and_nothing_without(special, http):
    with special.client() as client:
        shown = _forced(client).json()
        with client.stream("POST", "/completion", json={"prompt": "Hello", "n_predict": 2, "temperature": 0,
                                                         "logit_bias": [[IM_START, 100]], "stream": True}) as stream:
            streamed = "".join(json.loads(line[6:]).get("content", "") for line in stream.iter_lines()
                               if line.startswith("data: "))
        chat = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 64, "temperature": 0}).json()
    hidden = _forced(http).json()
    assert shown["content"] == streamed == "<|im_start|><|im_start|>"
    assert hidden["content"] == ""
    choice = chat["choices"][0]  # the model ends its answer greedily within 64 tokens
    assert choice["finish_reason"] == "stop" and choice["message"]["content"].endswith("<|im_end|>")


def test_post_props_answers_success_with_the_flag(special, http):
    with special.client() as client:
        assert client.post("/props", json={"n_ctx": 4}).json() == {"success": True}
        assert client.get("/props").json()["endpoint_props"] is True
        assert client.post("/props", json=[1]).status_code == 400
        assert client.post("/props", content=b"{nope").status_code == 400
    assert http.get("/props").json()["endpoint_props"] is False
