"""Google Cloud Vertex AI's custom-container contract, as llama-server serves it
(AIP_MODE=PREDICTION): the port AIP_HTTP_PORT says (not --port), a second health path
open without the API key, and POST AIP_PREDICT_ROUTE whose instances each run on the
route their @requestFormat names (a path or its camelCase name), whole, the answers in
order, every failure an error object in its place."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.server_process import ServerProcess, free_port

pytestmark = pytest.mark.slow
KEY = {"Authorization": "Bearer vertex-secret"}


@pytest.fixture(scope="module")
def vertex():
    port = free_port()
    proc = ServerProcess("-c", "2048", "-np", "2", "--api-key", "vertex-secret", "--max-body-bytes", str(1 << 20),
                         env={"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port), "AIP_HEALTH_ROUTE": "/ping",
                              "AIP_PREDICT_ROUTE": "predict"})
    ignored_port = proc.port
    proc.port, proc.base_url = port, f"http://127.0.0.1:{port}"
    try:
        proc.wait_ready()
        proc.ignored_port = ignored_port
        yield proc
    finally:
        proc.stop()


def test_the_port_and_the_open_health_path(vertex):
    with vertex.client() as client:
        assert client.get("/ping").status_code == 200 and client.get("/ping").json()["status"] == "ok"
        assert client.get("/v1/models").status_code == 401  # the rest still wants the key
        assert client.post("/predict", json={"instances": []}).status_code == 401
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{vertex.ignored_port}/health", timeout=2)
    assert "Vertex AI (AIP_MODE=PREDICTION)" in vertex.log()


def test_each_instance_runs_on_its_route_in_order(vertex):
    hi = [{"role": "user", "content": "Say hi."}]
    instances = [
        {"@requestFormat": "chatCompletions", "messages": hi, "max_tokens": 4, "stream": True},
        {"@requestFormat": "/v1/completions", "prompt": "Hello", "max_tokens": 3, "temperature": 0},
        {"@requestFormat": "tokenize", "content": "hello world"},
        {"@requestFormat": "completions", "prompt": "Hello", "n_predict": 2},  # llama-server's: /completions
        {"@requestFormat": "noSuchRoute"},
        {"@requestFormat": "predict", "instances": []},  # never itself
        "not an object",
        {"no": "format"},
        {"@requestFormat": "chatCompletions", "messages": [{"role": "user", "content": "\ud800"}]},
    ]
    with vertex.client(headers={**KEY, "content-type": "application/json"}) as client:
        answer = client.post("/predict", content=json.dumps({"instances": instances}).encode())  # \ud800 escaped
        assert client.get("/health").status_code == 200  # still serving
    assert answer.status_code == 200, answer.text
    chat, legacy, tokens, native, unknown, itself, not_object, no_format, surrogate = answer.json()["predictions"]
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
    assert legacy["object"] == "text_completion" and legacy["usage"]["completion_tokens"] > 0
    assert len(tokens["tokens"]) >= 2
    assert "content" in native and native["tokens_predicted"] > 0  # the native answer, not OpenAI's
    assert "no handler registered for @requestFormat: noSuchRoute" in unknown["error"]["message"]
    assert "no handler registered" in itself["error"]["message"]
    assert not_object["error"]["message"] == "each instance must be a JSON object"
    assert no_format["error"]["message"] == "each instance must include a string @requestFormat"
    assert surrogate["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("body, message", [
    (b"{", "not valid JSON"),
    (b"[]", "request body must be a JSON object"),
    (b'{"instances": {}}', "request body must include an array field named instances"),
    (b'{"instances": [' + b",".join([b"{}"] * 129) + b"]}", "instances array exceeds maximum size of 128"),
])
def test_a_bad_predict_body_is_a_400(vertex, body, message):
    with vertex.client(headers={**KEY, "content-type": "application/json"}) as client:
        answer = client.post("/predict", content=body)
    assert answer.status_code == 400 and message in answer.json()["error"]["message"], answer.text


def test_a_predict_body_past_max_body_bytes_is_a_413(vertex):
    big = b'{"instances": [{"@requestFormat": "tokenize", "content": "' + b"a" * (2 << 20) + b'"}]}'
    with vertex.client(headers={**KEY, "content-type": "application/json"}) as client:
        answer, chunked = client.post("/predict", content=big), client.post("/predict", content=iter([big]))
    for refused in (answer, chunked):  # the length declared, or none (chunked): never buffered whole
        assert refused.status_code == 413 and "exceeds" in refused.json()["error"]["message"], refused.text
    with vertex.client(headers={**KEY, "content-type": "application/json"}) as client:
        assert client.get("/ping").status_code == 200


def test_a_predict_request_wakes_only_the_models_its_instances_need():
    """With --sleep-idle-seconds and an embedding model beside the chat model, an embeddings
    instance wakes the embedding model alone: the predict route itself needs no model."""
    from tests.e2e.test_embeddings import EMBEDDING_MODEL
    port = free_port()
    proc = ServerProcess("-c", "1024", "-np", "1", "--embedding-model", EMBEDDING_MODEL, "--sleep-idle-seconds", "1",
                         env={"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port), "AIP_PREDICT_ROUTE": "/predict"})
    proc.port, proc.base_url = port, f"http://127.0.0.1:{port}"
    try:
        proc.wait_ready()
        with proc.client() as client:
            deadline = time.monotonic() + 60
            while not ((props := client.get("/props").json())["is_sleeping"]
                       and props["embedding_model"]["is_sleeping"]):
                assert time.monotonic() < deadline, props
                time.sleep(0.2)
            answer = client.post("/predict", json={"instances": [{"@requestFormat": "/v1/embeddings", "input": "a dog"}]})
            after = client.get("/props").json()
    finally:
        proc.stop()
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["predictions"][0]["data"][0]["embedding"]) == 384
    assert after["is_sleeping"] is True and after["embedding_model"]["is_sleeping"] is False
