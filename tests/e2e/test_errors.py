"""Bad input gets a clear 4xx in the spec's error shape and the server keeps serving."""

from __future__ import annotations

import pytest


def _error(response, status: int, kind: str = "invalid_request_error") -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == kind
    assert set(error) >= {"message", "type", "code"}
    return error["message"]


@pytest.mark.parametrize("path", ["/v1/completions", "/completions", "/completion", "/tokenize", "/detokenize"])
def test_malformed_json(http, path):
    message = _error(http.post(path, content=b'{"prompt": "x",', headers={"content-type": "application/json"}), 400)
    assert "JSON" in message


@pytest.mark.parametrize("payload", [b"[1, 2]", b'"text"', b"", b"\xff\xfe"])
def test_body_must_be_a_json_object(http, payload):
    _error(http.post("/v1/completions", content=payload), 400)


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "prompt"),
        ({"prompt": 123}, "prompt"),
        ({"prompt": "x", "max_tokens": "lots"}, "max_tokens"),
        ({"prompt": "x", "max_tokens": -5}, "max_tokens"),
        ({"prompt": "x", "temperature": -1}, "temperature"),
        ({"prompt": "x", "top_p": 2}, "top_p"),
        ({"prompt": "x", "stop": 5}, "stop"),
        ({"prompt": "x", "stream": "yes please"}, "stream"),
        ({"prompt": "x", "stop": ["s"] * 65}, "stop"),
    ],
)
def test_wrong_types_and_ranges_name_the_field(http, body, field):
    assert field in _error(http.post("/v1/completions", json=body), 400)


def test_native_route_validates_too(http):
    assert "n_predict" in _error(http.post("/completion", json={"prompt": "x", "n_predict": "many"}), 400)
    assert "content" in _error(http.post("/tokenize", json={}), 400)
    assert "tokens" in _error(http.post("/detokenize", json={"tokens": "1,2"}), 400)


def test_prompt_with_bad_token_id(http):
    assert "49152" in _error(http.post("/completion", json={"prompt": [1, 49152]}), 400)


def test_empty_prompt(http):
    _error(http.post("/completion", json={"prompt": ""}), 400)


def test_oversized_body_is_refused(http):
    big = b'{"prompt": "' + b"a" * (33 * 1024 * 1024) + b'"}'
    _error(http.post("/v1/completions", content=big), 413)


def test_unknown_route_and_method(http):
    _error(http.get("/v1/nothing-here"), 404, "not_found_error")
    assert http.get("/v1/completions").headers["allow"] == "POST"  # a 405 names the methods it takes
    _error(http.get("/v1/completions"), 405)


@pytest.mark.parametrize("path", ["/health", "/props", "/v1/models", "/slots"])
def test_head_answers_as_get_without_the_body(http, path):
    head, get = http.head(path), http.get(path)  # llama-server's HTTP library answers HEAD on its GET routes
    assert head.status_code == get.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]
    assert http.head("/v1/completions").status_code == 405 and http.get("/health").status_code == 200


def test_unknown_response_format_type(http):
    assert "response_format" in _error(
        http.post("/v1/completions", json={"prompt": "x", "response_format": {"type": "xml"}}), 400)


def test_generation_stops_with_length_at_the_end_of_the_slot(http):
    prompt = "word " * 1000
    n_prompt = len(http.post("/tokenize", json={"content": prompt}).json()["tokens"])
    body = http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 500, "temperature": 0,
                                              "ignore_eos": True, "cache_prompt": False}).json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert n_prompt + body["usage"]["completion_tokens"] <= 1024
    assert body["usage"]["completion_tokens"] >= 1024 - n_prompt - 1


def test_server_keeps_serving_after_bad_input(http):
    for payload in (b"{", b"[]", b'{"prompt": {"a": 1}}', b'{"prompt": "x", "n": 100000}'):
        assert 400 <= http.post("/v1/completions", content=payload).status_code < 500
    assert http.get("/health").status_code == 200
    ok = http.post("/completion", json={"prompt": "Hi", "n_predict": 2})
    assert ok.status_code == 200 and ok.json()["tokens_predicted"] == 2
