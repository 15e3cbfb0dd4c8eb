"""POST /infill as llama-server serves it: fill-in-the-middle on Qwen2.5-Coder (whose
GGUF has no fim_* keys: llama.cpp finds its FIM tokens by their text), with
/completion's response and stream; input_extra validated with llama-server's 400s;
a model without FIM tokens gets its 501."""

from __future__ import annotations

import json

import pytest

GAP = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\nprint(add(2, 3))\n"}


def _fill(client, **body) -> dict:
    response = client.post("/infill", json={**GAP, "n_predict": 12, "temperature": 0, **body})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def coder(qwen):
    with qwen.client(timeout=300) as client:
        yield client


def test_infill_fills_a_real_gap(coder):
    body = _fill(coder)
    assert "a + b" in body["content"]
    # /completion's response, as llama-server answers /infill
    assert body["stop"] is True and body["stop_type"] in ("eos", "limit")
    assert {"tokens_predicted", "tokens_evaluated", "generation_settings", "timings", "truncated",
            "id_slot", "model"} <= set(body)


def test_infill_streams_as_completion_does(coder):
    with coder.stream("POST", "/infill", json={**GAP, "n_predict": 12, "temperature": 0, "stream": True}) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1]["stop"] is True and all(not e["stop"] for e in events[:-1])
    assert "a + b" in "".join(e["content"] for e in events)


def test_repository_chunks_go_before_the_prefix(coder):
    plain = _fill(coder, n_predict=1)
    extra = [{"filename": "util.py", "text": "def mul(a, b):\n    return a * b\n"}, {"text": "x = 1\n"}]
    with_extra = _fill(coder, n_predict=1, input_extra=extra)
    assert with_extra["tokens_evaluated"] > plain["tokens_evaluated"] + 15  # the chunks are in the prompt


def test_prompt_continues_after_the_prefix(coder):
    body = _fill(coder, prompt="a")
    assert body["content"].lstrip().startswith("+")


@pytest.mark.parametrize("body, message", [
    ({"input_extra": {"text": "x"}}, '"input_extra" must be an array of {"filename": string, "text": string}'),
    ({"input_extra": "x"}, '"input_extra" must be an array of {"filename": string, "text": string}'),
    ({"input_extra": [{"filename": "a.py"}]}, 'extra_context chunk must contain a "text" field with a string value'),
    ({"input_extra": [{"text": 5}]}, 'extra_context chunk must contain a "text" field with a string value'),
    ({"input_extra": ["x"]}, 'extra_context chunk must contain a "text" field with a string value'),
    ({"input_extra": [{"text": "x", "filename": 3}]}, 'extra_context chunk\'s "filename" field must be a string'),
    ({"prompt": ["x"]}, '"prompt" must be a string'),
    ({"drop": "input_prefix"}, '"input_prefix" is required'),
    ({"drop": "input_suffix"}, '"input_suffix" is required'),
    ({"input_prefix": {"a": 1}}, '"input_prefix" must be a string or an array of strings and token ids'),
])
def test_malformed_infill_fields_are_llama_servers_400s(coder, body, message):
    request = {**GAP, **body}
    request.pop(request.pop("drop", None) or "", None)
    response = coder.post("/infill", json=request)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["message"] == message
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_a_model_without_fim_tokens_gets_llama_servers_501(http):
    response = http.post("/infill", json=GAP)
    assert response.status_code == 501, response.text
    assert response.json()["error"] == {
        "code": 501,
        "type": "not_supported_error",
        "message": "Infill is not supported by this model: prefix token is missing. suffix token is missing. "
                   "middle token is missing. ",
    }
