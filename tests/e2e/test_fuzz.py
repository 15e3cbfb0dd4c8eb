"""Fuzzing every body-reading route of a real server with requests built from its own
wire models (tests/fuzz_strategies.py), streamed and whole, most of them mutated the
way a hostile client would. Whatever comes: no 5xx (but the spec's /detokenize one),
every error in the spec's shape, no request running past its timeout, and the server
healthy and serving afterwards.

Derandomized, so CI replays the same bodies every run; a failure prints the body
(shrunk) that caused it."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, example, given, settings

from mlxcel.api.anthropic.wire import CountTokensRequest, MessagesRequest
from mlxcel.api.native.wire import DetokenizeRequest, NativeCompletionRequest, TokenizeRequest
from mlxcel.api.openai.chat_wire import ChatCompletionRequest
from mlxcel.api.openai.completions_wire import CompletionRequest
from mlxcel.api.responses.wire import CompactRequest, ResponsesRequest
from tests.e2e.fuzz_client import checked_problems
from tests.fuzz_strategies import hostile_bodies

# (path, wire model, the field that bounds generation, examples): routes that generate
# get more examples. About a minute on 2 idle cores; MLXCEL_FUZZ_SCALE multiplies the
# examples (a deeper local hunt: MLXCEL_FUZZ_SCALE=10).
SCALE = float(os.environ.get("MLXCEL_FUZZ_SCALE", "1"))
ROUTES = [
    ("/v1/chat/completions", ChatCompletionRequest, "max_tokens", 220),
    ("/v1/completions", CompletionRequest, "max_tokens", 120),
    ("/completion", NativeCompletionRequest, "n_predict", 120),
    ("/tokenize", TokenizeRequest, None, 60),
    ("/detokenize", DetokenizeRequest, None, 60),
    ("/v1/messages", MessagesRequest, "max_tokens", 180),
    ("/v1/messages/count_tokens", CountTokensRequest, None, 60),
    ("/v1/responses", ResponsesRequest, "max_output_tokens", 180),
    ("/v1/responses/input_tokens", ResponsesRequest, None, 60),
    ("/v1/responses/compact", CompactRequest, "max_output_tokens", 90),
]


# bodies the fuzzing found that once broke the server, replayed first on every run
FOUND = {
    # a repeat penalty of 0 turned grammar-masked tokens' -inf into NaN: "rejected token", a 500
    "/v1/completions": [b'{"repetition_penalty":0.0,"prompt":"0","response_format":{"type":"json_schema",'
                        b'"json_schema":{"schema":{"type":"string","enum":["a","b"]}}},"max_tokens":2}'],
    # a system block whose type is not a string: TypeError in the translation, a 500
    "/v1/messages": [b'{"messages":[{"role":"assistant","content":[]}],"system":[{"type":[],"name":"get_weather"},'
                     b'{"type":"text","text":"b"}],"max_tokens":4}'],
}


@pytest.fixture(scope="module")
def client(server):
    with server.client() as client:
        yield client


@pytest.mark.parametrize("path, model, budget_field, examples", ROUTES, ids=[r[0] for r in ROUTES])
def test_fuzzed_bodies_never_break_the_server(client, path, model, budget_field, examples):
    @settings(max_examples=max(1, round(examples * SCALE)), deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate, Phase.shrink],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
                                     HealthCheck.large_base_example])
    @given(raw=hostile_bodies(model, budget_field))
    def fuzz(raw: bytes) -> None:
        found = checked_problems(client, path, raw)
        assert not found, "\n".join(found) + f"\nbody sent: {raw[:2000]!r}"

    for raw in FOUND.get(path, []):
        fuzz = example(raw=raw)(fuzz)
    fuzz()
    assert client.get("/health").status_code == 200


def test_server_is_healthy_and_serving_after_the_fuzzing(client):
    assert client.get("/health").status_code == 200
    response = client.post("/v1/chat/completions",
                           json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["role"] == "assistant"
