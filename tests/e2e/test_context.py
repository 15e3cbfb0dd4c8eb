"""The end of a slot's context, as llama-server handles it: a prompt that does not fit
is a 400 `exceed_context_size_error` on every generation route, streamed or not (before
any stream starts); generation stops at the context's end with stop_type "limit" and
`truncated`; with --context-shift it shifts the context and goes on."""

from __future__ import annotations

import pytest

from tests.server_process import ServerProcess

N_CTX_SLOT = 1024  # the shared server: -c 4096 -np 4
LONG = "word " * 1100
LONG_BODIES = {
    "/completion": {"prompt": LONG, "n_predict": 4},
    "/completions": {"prompt": LONG, "n_predict": 4},
    "/v1/completions": {"prompt": LONG, "max_tokens": 4},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": LONG}], "max_tokens": 4},
}


def _prompt_tokens(http, text: str) -> int:
    return len(http.post("/tokenize", json={"content": text}).json()["tokens"])


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", list(LONG_BODIES))
def test_a_prompt_longer_than_the_slot_is_llama_servers_400(http, path, stream):
    response = http.post(path, json={**LONG_BODIES[path], "stream": stream})
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")  # no stream was opened
    error = response.json()["error"]
    n_prompt = error["n_prompt_tokens"]
    assert {k: v for k, v in error.items() if k != "n_prompt_tokens"} == {
        "code": 400,
        "type": "exceed_context_size_error",
        "n_ctx": N_CTX_SLOT,
        "message": f"request ({n_prompt} tokens) exceeds the available context size ({N_CTX_SLOT} tokens), "
                   "try increasing it",
    }
    if path != "/v1/chat/completions":  # a chat prompt also holds its template's tokens
        assert n_prompt == _prompt_tokens(http, LONG)
    assert n_prompt > N_CTX_SLOT


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_keeps_its_error_shape_for_an_overflow(http, stream):
    body = {"model": "m", "max_tokens": 4, "stream": stream, "messages": [{"role": "user", "content": LONG}]}
    response = http.post("/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert response.status_code == 400, response.text
    assert response.json()["type"] == "error"
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and "exceeds the available context size" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_keep_the_openai_shape_for_an_overflow(http, stream):
    response = http.post("/v1/responses", json={"input": LONG, "max_output_tokens": 4, "stream": stream})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"], error["n_ctx"]) == ("invalid_request_error", "context_length_exceeded",
                                                              N_CTX_SLOT)
    assert error["n_prompt_tokens"] > N_CTX_SLOT


def test_without_context_shift_generation_stops_at_the_context_end(http):
    prompt = "word " * 1000
    n_prompt = _prompt_tokens(http, prompt)
    body = http.post("/completion", json={"prompt": prompt, "n_predict": 500, "temperature": 0, "ignore_eos": True,
                                          "cache_prompt": False}).json()
    assert (body["stop_type"], body["truncated"]) == ("limit", True)
    assert body["tokens_predicted"] == N_CTX_SLOT - n_prompt  # as llama-server counts it
    short = http.post("/completion", json={"prompt": "Hi", "n_predict": 3, "ignore_eos": True}).json()
    assert (short["stop_type"], short["truncated"]) == ("limit", False)


@pytest.fixture(scope="module")
def shifting():
    """One slot of 256 tokens that shifts its context when full."""
    proc = ServerProcess("-c", "256", "-np", "1", "--context-shift", "-t", "1")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def test_context_shift_generates_past_the_context(shifting):
    body = {"prompt": "Once upon a time", "n_predict": 300, "temperature": 0, "ignore_eos": True, "n_keep": 4}
    with shifting.client(timeout=600) as client:
        first = client.post("/completion", json=body).json()
        assert first["tokens_predicted"] == 300 > 256  # more tokens than the context holds
        assert (first["stop_type"], first["truncated"]) == ("limit", True)
        # a shifted sequence's memory is reused only up to its kept prefix, never as if unshifted
        again = client.post("/completion", json={**body, "n_predict": 2}).json()
        assert again["timings"]["cache_n"] <= 4 and again["tokens_predicted"] == 2
    assert "context shift" in shifting.log()
