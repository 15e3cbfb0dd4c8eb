"""/v1/completions through the OpenAI SDK and httpx."""

from __future__ import annotations

import json

import pytest

PROMPT = "The capital of France is"


def test_sdk_completion_greedy_is_deterministic(openai_client):
    first = openai_client.completions.create(model="any", prompt=PROMPT, max_tokens=12, temperature=0)
    second = openai_client.completions.create(model="any", prompt=PROMPT, max_tokens=12, temperature=0)
    assert first.object == "text_completion"
    assert first.choices[0].text and first.choices[0].text == second.choices[0].text
    assert "Paris" in first.choices[0].text
    assert first.choices[0].finish_reason == "length"
    assert first.usage.completion_tokens == 12
    assert first.usage.total_tokens == first.usage.prompt_tokens + 12


def test_sdk_streaming_matches_non_streaming(openai_client):
    whole = openai_client.completions.create(model="m", prompt=PROMPT, max_tokens=16, temperature=0)
    stream = openai_client.completions.create(
        model="m", prompt=PROMPT, max_tokens=16, temperature=0, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == whole.choices[0].text
    assert finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16


def test_stream_ends_with_done_and_usage_only_when_asked(http):
    def events(body):
        with http.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            return [line[6:] for line in response.iter_lines() if line.startswith("data: ")]

    plain = events({"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "stream": True})
    assert plain[-1] == "[DONE]"
    assert all("usage" not in json.loads(e) for e in plain[:-1])
    choices = [c for e in plain[:-1] for c in json.loads(e)["choices"]]
    assert "".join(c["text"] for c in choices)
    assert all(c["delta"] == {"text": c["text"]} for c in choices)  # the spec's delta, beside OpenAI's text
    with_usage = events(
        {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert json.loads(with_usage[-2])["usage"]["completion_tokens"] == 4


CHAT_PROMPT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
               "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")


def test_eos_stops_with_stop_reason(http):
    body = http.post("/v1/completions", json={"prompt": CHAT_PROMPT, "max_tokens": 200, "temperature": 0}).json()
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"]["completion_tokens"] < 200
    assert "<|im_end|>" not in body["choices"][0]["text"]


def test_stop_string_is_not_emitted_and_stops(http):
    full = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 24, "temperature": 0}).json()
    text = full["choices"][0]["text"]
    assert "." in text
    cut = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "stop": ["."]}).json()
    assert cut["choices"][0]["text"] == text[: text.index(".")]
    assert cut["choices"][0]["finish_reason"] == "stop"


def test_stop_string_spanning_tokens_is_held_back_in_stream(http):
    full = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 24, "temperature": 0}).json()
    text = full["choices"][0]["text"]
    stop = text[3:9]  # a stop string that starts inside one token and ends in another
    with http.stream("POST", "/v1/completions", json={
        "prompt": PROMPT, "max_tokens": 24, "temperature": 0, "stop": [stop], "stream": True
    }) as response:
        pieces = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    streamed = "".join(p["choices"][0]["text"] for p in pieces if p["choices"])
    assert streamed == text[: text.index(stop)]
    assert stop not in streamed


def test_several_prompts_answer_several_choices(http):
    body = http.post("/v1/completions", json={"prompt": [PROMPT, "One, two, three,"], "max_tokens": 6,
                                              "temperature": 0}).json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    alone = http.post("/v1/completions", json={"prompt": "One, two, three,", "max_tokens": 6, "temperature": 0}).json()
    assert body["choices"][1]["text"] == alone["choices"][0]["text"]


def test_token_array_prompt_equals_text_prompt(http):
    tokens = http.post("/tokenize", json={"content": PROMPT}).json()["tokens"]
    by_tokens = http.post("/v1/completions", json={"prompt": tokens, "max_tokens": 8, "temperature": 0}).json()
    by_text = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8, "temperature": 0}).json()
    assert by_tokens["choices"][0]["text"] == by_text["choices"][0]["text"]


def test_echo_prepends_the_prompt(http):
    body = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "echo": True}).json()
    assert body["choices"][0]["text"].startswith(PROMPT)


def test_seed_reproduces_sampled_output(http):
    request = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
               "min_p": 0.0, "seed": 1234}
    a = http.post("/v1/completions", json=request).json()["choices"][0]["text"]
    b = http.post("/v1/completions", json=request).json()["choices"][0]["text"]
    others = {http.post("/v1/completions", json={**request, "seed": s}).json()["choices"][0]["text"] for s in (1, 2, 3)}
    assert a == b
    assert len(others | {a}) > 1


def test_ignore_eos_generates_exactly_max_tokens(http):
    body = http.post("/v1/completions", json={"prompt": CHAT_PROMPT, "max_tokens": 40, "temperature": 0,
                                              "ignore_eos": True}).json()
    assert body["usage"]["completion_tokens"] == 40
    assert body["choices"][0]["finish_reason"] == "length"


def test_logprobs_in_openai_legacy_shape(openai_client):
    whole = openai_client.completions.create(model="m", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3)
    choice = whole.choices[0]
    logprobs = choice.logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs) == 6
    assert "".join(logprobs.tokens) == choice.text
    assert logprobs.text_offset == [sum(len(t) for t in logprobs.tokens[:i]) for i in range(6)]
    for token, value, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
        assert value <= 0 and 1 <= len(top) <= 3
        assert max(top.values()) == top[token] == pytest.approx(value)  # greedy: the most likely token
    stream = openai_client.completions.create(model="m", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3,
                                              stream=True)
    streamed = [c.choices[0].logprobs for c in stream if c.choices and c.choices[0].logprobs]
    assert [t for lp in streamed for t in lp.tokens] == logprobs.tokens
    assert [v for lp in streamed for v in lp.token_logprobs] == pytest.approx(logprobs.token_logprobs, abs=1e-3)
    plain = openai_client.completions.create(model="m", prompt=PROMPT, max_tokens=2, temperature=0)
    assert plain.choices[0].logprobs is None


def test_logprobs_end_where_a_stop_sequence_cut_the_text(openai_client):
    """The stop sequence's tokens are not the text's, so not in its logprobs (as llama-server
    cuts them); they were listed, ", 1" after " 7, 8, 9"."""
    choice = openai_client.completions.create(model="m", prompt="1, 2, 3, 4, 5, 6,", max_tokens=20, temperature=0,
                                              logprobs=1, stop=[", 1"]).choices[0]
    assert choice.finish_reason == "stop" and choice.text == " 7, 8, 9"
    assert "".join(choice.logprobs.tokens) == choice.text


def test_usage_counts_a_prompt_s_cached_tokens_once_whatever_n(http):
    """Two prompts, two completions each, sent again so their prefixes are cached: the
    cached tokens are those of the prompts counted, never more than they (each copy's were
    added up, 28 cached of 20 prompt tokens)."""
    body = {"prompt": ["1, 2, 3, 4,", "a b c a b c a b c"], "max_tokens": 4, "temperature": 0, "n": 2}
    http.post("/v1/completions", json=body)
    usage = http.post("/v1/completions", json=body).json()["usage"]
    assert 0 < usage["prompt_tokens_details"]["cached_tokens"] < usage["prompt_tokens"]
    streamed = None
    with http.stream("POST", "/v1/completions", json={**body, "stream": True,
                                                      "stream_options": {"include_usage": True}}) as response:
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]" and json.loads(line[6:]).get("usage"):
                streamed = json.loads(line[6:])["usage"]
    assert streamed["prompt_tokens"] == usage["prompt_tokens"]
    assert 0 < streamed["prompt_tokens_details"]["cached_tokens"] < streamed["prompt_tokens"]


def test_text_offsets_count_a_character_split_across_tokens_once(openai_client):
    """Katakana, three bytes a character, comes a byte pair or so a token: each offset
    is where its token's text starts in the choice's text, never past its end."""
    request = {"model": "m", "prompt": "日本語の単語:", "max_tokens": 10, "temperature": 0, "logprobs": 1}
    choice = openai_client.completions.create(**request).choices[0]
    offsets = choice.logprobs.text_offset
    assert len(offsets) == 10 and len(choice.text) < 10  # some token carries part of a character
    assert offsets == sorted(offsets) and offsets[0] == 0 and offsets[-1] < len(choice.text)
    streamed = [c.choices[0].logprobs for c in openai_client.completions.create(**request, stream=True)
                if c.choices and c.choices[0].logprobs]
    assert [o for lp in streamed for o in lp.text_offset] == offsets
