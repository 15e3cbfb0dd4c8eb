"""llama-server's native routes: /completion, /tokenize, /detokenize."""

from __future__ import annotations

import json

PROMPT = "The capital of France is"


def test_completion_has_llama_server_fields(http):
    body = http.post("/completion", json={"prompt": PROMPT, "n_predict": 8, "temperature": 0}).json()
    assert body["stop"] is True
    assert body["tokens_predicted"] == 8
    assert body["tokens_evaluated"] == len(http.post("/tokenize", json={"content": PROMPT}).json()["tokens"])
    assert body["stop_type"] == "limit"
    assert "Paris" in body["content"]
    timings = body["timings"]
    assert timings["predicted_n"] == 8 and timings["predicted_ms"] > 0 and timings["prompt_n"] >= 1
    assert body["generation_settings"]["n_predict"] == 8


def test_completion_stream_concatenates_to_the_same_content(http):
    whole = http.post("/completion", json={"prompt": PROMPT, "n_predict": 12, "temperature": 0}).json()
    with http.stream("POST", "/completion", json={"prompt": PROMPT, "n_predict": 12, "temperature": 0,
                                                  "stream": True, "return_tokens": True}) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1]["stop"] is True and "timings" in events[-1]
    assert all(e["stop"] is False for e in events[:-1])
    assert "".join(e["content"] for e in events) == whole["content"]
    assert sum(len(e["tokens"]) for e in events[:-1]) == 12
    assert events[-1]["tokens"] == []  # as llama-server's: the chunks carried them (they came twice)


def test_stream_chunks_carry_their_token_without_return_tokens(http):
    """As llama-server's: each partial chunk names the token it carries; only the whole
    answer's `tokens` depends on return_tokens."""
    body = {"prompt": PROMPT, "n_predict": 12, "temperature": 0}
    whole = http.post("/completion", json=body | {"return_tokens": True}).json()
    assert http.post("/completion", json=body).json()["tokens"] == []
    with http.stream("POST", "/completion", json=body | {"stream": True}) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [t for e in events[:-1] for t in e["tokens"]] == whole["tokens"]
    assert events[-1]["tokens"] == []


def test_soft_limited_numbers_are_clamped_as_llama_server_does(http):
    """llama-server clamps temperature, top_k, top_p, min_p, typical_p and XTC's two
    into their ranges on /completion (its temperature -1 is greedy); the rest of a body
    is still checked (a mirostat mode that does not exist included)."""
    body = {"prompt": PROMPT, "n_predict": 8, "seed": 3}
    greedy = http.post("/completion", json=body | {"temperature": 0}).json()
    assert http.post("/completion", json=body | {"temperature": -1}).json()["content"] == greedy["content"]
    outside = {"temperature": -1, "top_p": 2, "top_k": -7, "min_p": -0.5, "typical_p": 3, "xtc_probability": 9}
    inside = {"temperature": 0, "top_p": 1, "top_k": 0, "min_p": 0, "typical_p": 1, "xtc_probability": 1}
    clamped = http.post("/completion", json=body | outside)
    assert clamped.status_code == 200, clamped.text
    answer = clamped.json()
    assert answer["content"] == http.post("/completion", json=body | inside).json()["content"]
    settings = answer["generation_settings"]
    assert (settings["temperature"], settings["top_p"], settings["top_k"], settings["min_p"]) == (0.0, 1.0, 0, 0.0)
    assert settings["xtc_probability"] == 1.0
    refused = http.post("/completion", json=body | {"temperature": -1, "repeat_last_n": -5})
    assert refused.status_code == 400 and "repeat_last_n" in refused.text
    assert http.post("/completion", json=body | {"mirostat": 7}).status_code == 400
    assert http.post("/completion", json=body | {"temperature": "cold"}).status_code == 400


def test_stop_word_is_reported(http):
    body = http.post("/completion", json={"prompt": PROMPT, "n_predict": 24, "temperature": 0, "stop": ["."]}).json()
    assert body["stop_type"] == "word" and body["stopping_word"] == "."
    assert "." not in body["content"]


def test_tokenize_detokenize_round_trip(http):
    text = "Hello, world! Ünïcödé ✓ 123"
    tokens = http.post("/tokenize", json={"content": text}).json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert http.post("/detokenize", json={"tokens": tokens}).json()["content"] == text


def test_tokenize_with_pieces(http):
    pieces = http.post("/tokenize", json={"content": "Hello world", "with_pieces": True}).json()["tokens"]
    assert "".join(p["piece"] for p in pieces) == "Hello world"
    assert all(isinstance(p["id"], int) for p in pieces)


def test_tokenize_parses_special_tokens(http):
    tokens = http.post("/tokenize", json={"content": "<|im_start|>"}).json()["tokens"]
    assert len(tokens) == 1


def test_detokenize_rejects_out_of_range_ids_before_decoding(http):
    for bad in (-1, 49152, 2**40):
        response = http.post("/detokenize", json={"tokens": [1, 2, bad, 7]})
        assert response.status_code == 500  # spec 001's error table names this 500
        error = response.json()["error"]
        assert error["type"] == "server_error"
        assert error["message"] == f"token id {bad} is out of vocabulary range (vocab_size 49152)"


def test_completion_rejects_structured_response_format(http):
    response = http.post("/completion", json={"prompt": PROMPT, "response_format": {"type": "json_object"}})
    assert response.status_code == 400
    ok = http.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "response_format": {"type": "text"}})
    assert ok.status_code == 200
