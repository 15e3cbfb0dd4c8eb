"""/v1/chat/completions on SmolLM2 (the shared server), through the OpenAI SDK and httpx."""

from __future__ import annotations

import json

import pytest

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


def _chat(http, **body):
    return http.post("/v1/chat/completions", json={"messages": QUESTION, "temperature": 0, **body})


def test_sdk_chat_completion(openai_client):
    reply = openai_client.chat.completions.create(model="m", messages=QUESTION, temperature=0, max_tokens=40)
    assert reply.object == "chat.completion"
    choice = reply.choices[0]
    assert choice.message.role == "assistant"
    assert "4" in choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_sdk_streaming_has_the_spec_shape(openai_client):
    whole = openai_client.chat.completions.create(model="m", messages=QUESTION, temperature=0, max_tokens=24)
    chunks = list(openai_client.chat.completions.create(
        model="m", messages=QUESTION, temperature=0, max_tokens=24, stream=True,
        stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_stream_without_usage_ends_with_done(http):
    with http.stream("POST", "/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 4,
                                                            "stream": True}) as response:
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    bodies = [json.loads(x) for x in lines[:-1]]
    assert all(b["object"] == "chat.completion.chunk" and "usage" not in b for b in bodies)
    assert bodies[0]["choices"][0]["delta"] == {"role": "assistant"}


def test_developer_role_renders_as_system_and_text_parts_as_string(http):
    as_system = _chat(http, messages=[{"role": "system", "content": "Be brief."}, *QUESTION], max_tokens=8).json()
    as_developer = _chat(http, messages=[{"role": "developer", "content": "Be brief."}, *QUESTION], max_tokens=8).json()
    as_parts = _chat(http, max_tokens=8, messages=[
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}]).json()
    assert as_system["usage"]["prompt_tokens"] == as_developer["usage"]["prompt_tokens"]
    assert as_system["choices"][0]["message"]["content"] == as_developer["choices"][0]["message"]["content"]
    assert as_parts["choices"][0]["message"]["content"] == as_system["choices"][0]["message"]["content"]


@pytest.mark.parametrize("part", [
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    {"type": "video_url", "video_url": {"url": "https://example.invalid/v.mp4"}},
])
def test_media_parts_on_a_text_model_are_400(http, part):
    response = _chat(http, messages=[{"role": "user", "content": [{"type": "text", "text": "look"}, part]}])
    assert response.status_code == 400
    assert "not supported by model" in response.json()["error"]["message"]


def test_multi_turn_with_tool_messages_renders(http):
    response = _chat(http, max_tokens=4, messages=[
        *QUESTION, {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "And of Spain?"}])
    assert response.status_code == 200


def test_max_completion_tokens_wins(http):
    body = _chat(http, max_tokens=30, max_completion_tokens=3, ignore_eos=True).json()
    assert body["usage"]["completion_tokens"] == 3 and body["choices"][0]["finish_reason"] == "length"


def test_ignored_fields_are_logged(server, http):
    body = _chat(http, max_tokens=2, n=2, user="u-1", metadata={"k": "v"}, some_future_field=True).json()
    assert len(body["choices"]) == 2  # n is served (tests/e2e/test_chat_llama_server.py)
    log = server.log()
    assert body["id"] in log
    line = next(l for l in log.splitlines() if body["id"] in l and "ignored" in l)
    for name in ("metadata", "user", "some_future_field"):
        assert name in line
    assert "n " not in line.split("ignored", 1)[1]


def test_logprobs_in_openai_shape(http, openai_client):
    reply = openai_client.chat.completions.create(model="m", messages=QUESTION, temperature=0, max_tokens=5,
                                                  logprobs=True, top_logprobs=3)
    entries = reply.choices[0].logprobs.content
    assert len(entries) == reply.usage.completion_tokens
    for entry in entries:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob >= entry.top_logprobs[2].logprob
        assert entry.token == entry.top_logprobs[0].token  # greedy picks the most likely token
        assert abs(entry.logprob - entry.top_logprobs[0].logprob) < 1e-5
    assert "".join(e.token for e in entries) == reply.choices[0].message.content
    streamed = list(openai_client.chat.completions.create(model="m", messages=QUESTION, temperature=0, max_tokens=5,
                                                          logprobs=True, top_logprobs=2, stream=True))
    per_chunk = [c.choices[0].logprobs.content[0] for c in streamed if c.choices and c.choices[0].logprobs]
    assert [e.token for e in per_chunk] == [e.token for e in entries]
    assert _chat(http, logprobs=True, top_logprobs=21).status_code == 400


def test_logit_bias_bans_a_token(http):
    first = _chat(http, max_tokens=1, logprobs=True).json()
    banned = first["choices"][0]["logprobs"]["content"][0]
    token_id = http.post("/tokenize", json={"content": banned["token"]}).json()["tokens"][0]
    again = _chat(http, max_tokens=1, logprobs=True, logit_bias={str(token_id): -100}).json()
    assert again["choices"][0]["logprobs"]["content"][0]["token"] != banned["token"]
    assert _chat(http, logit_bias={"99999999": 5}).status_code == 400


def test_stop_strings_in_chat(http):
    full = _chat(http, max_tokens=30).json()["choices"][0]["message"]["content"]
    word = "problem"
    assert word in full
    cut = _chat(http, max_tokens=30, stop=[word]).json()
    assert cut["choices"][0]["message"]["content"] == full[: full.index(word)]
    assert cut["choices"][0]["finish_reason"] == "stop"


def test_same_seed_same_output(http):
    request = {"max_tokens": 20, "temperature": 1.2, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 99}
    a = _chat(http, **request).json()["choices"][0]["message"]["content"]
    b = _chat(http, **request).json()["choices"][0]["message"]["content"]
    assert a == b


@pytest.mark.parametrize("field, value", [("top_p", 2), ("temperature", -1), ("max_tokens", -7), ("min_count", 4097),
                                          ("top_logprobs", 50), ("xtc_probability", 3), ("presence_penalty", 9)])
def test_out_of_range_values_name_the_field(http, field, value):
    response = _chat(http, **{field: value})
    assert response.status_code == 400
    assert field in response.json()["error"]["message"]


def test_a_null_optional_field_reads_as_absent(http):
    """OpenAI's nullable fields, and llama-server's json_value: `"n": null` is n's
    default. Clients that serialize every field send them so (it was a 400)."""
    nulls = {"n": None, "logprobs": None, "top_logprobs": None, "stream": None, "ignore_eos": None}
    reply = _chat(http, max_tokens=2, **nulls)
    assert reply.status_code == 200, reply.text
    assert len(reply.json()["choices"]) == 1 and reply.json()["choices"][0]["logprobs"] is None
    legacy = http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "n": None, "echo": None,
                                                "stream": None, "stream_options": {"include_usage": None}})
    assert legacy.status_code == 200 and len(legacy.json()["choices"]) == 1
    native = http.post("/completion", json={"prompt": "Hi", "n_predict": 2, "stream": None, "return_tokens": None,
                                            "post_sampling_probs": None})
    assert native.status_code == 200 and native.json()["tokens_predicted"] == 2
    assert http.post("/v1/chat/completions", json={"messages": None}).status_code == 400  # required stays required
    anthropic = http.post("/v1/messages", json={"max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}],
                                                "stream": None, "system": None, "stop_sequences": None})
    assert anthropic.status_code == 200 and anthropic.json()["type"] == "message", anthropic.text
    assert http.post("/v1/messages", json={"max_tokens": None, "messages": [{"role": "user", "content": "Hi"}]}
                     ).status_code == 400  # Anthropic's max_tokens is required
    responses = http.post("/v1/responses", json={"input": "Hi", "max_output_tokens": 16, "stream": None,
                                                  "store": None, "background": None, "instructions": None})
    assert responses.status_code == 200 and responses.json()["store"] is True, responses.text


def test_logprobs_end_where_a_stop_sequence_cut_the_content(http):
    """The stop sequence's tokens are cut from the logprobs as from the content (as
    llama-server cuts them); they were listed, ", 1" after "8, 9"."""
    body = {"messages": [{"role": "user", "content": "List the numbers from 1 to 30 separated by commas."}],
            "max_tokens": 60, "temperature": 0, "logprobs": True, "stop": [", 1"]}
    choice = http.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["message"]["content"].endswith("8, 9")
    assert "".join(entry["token"] for entry in choice["logprobs"]["content"]) == choice["message"]["content"]


def test_top_logprobs_without_logprobs_is_a_400(http):
    """OpenAI and llama-server both refuse it; it was silently answered without logprobs."""
    for logprobs in ({}, {"logprobs": False}):
        response = _chat(http, max_tokens=2, top_logprobs=3, **logprobs)
        assert response.status_code == 400
        assert response.json()["error"]["message"] == "top_logprobs requires logprobs to be set to true"
    assert _chat(http, max_tokens=2, top_logprobs=3, logprobs=True).status_code == 200


def test_empty_messages_and_bad_roles(http):
    assert http.post("/v1/chat/completions", json={"messages": []}).status_code == 400
    assert http.post("/v1/chat/completions", json={"messages": [{"role": "wizard", "content": "x"}]}).status_code == 400
    assert http.post("/v1/chat/completions", json={"messages": "hello"}).status_code == 400


LOOPING = [{"role": "user", "content": "What is the capital of France?"}]
# a grammar that forces one phrase over and over, whatever the model's numerics on this CPU
REPEATING = {"grammar": 'root ::= item+\nitem ::= "la femme au roi, "'}


def test_loop_detection_stops_a_forced_repetition(http):
    plain = _chat(http, messages=LOOPING, max_tokens=80, **REPEATING).json()
    assert plain["usage"]["completion_tokens"] == 80 and plain["choices"][0]["finish_reason"] == "length"
    stopped = _chat(http, messages=LOOPING, max_tokens=80, max_pattern_size=8, min_count=3, **REPEATING).json()
    assert stopped["usage"]["completion_tokens"] < 40
    assert stopped["choices"][0]["finish_reason"] == "stop"
    text = stopped["choices"][0]["message"]["content"]
    assert plain["choices"][0]["message"]["content"].startswith(text)
    assert text.count("la femme au roi") == 3
    # an explicit max_pattern_size 0 forces detection off, and so does a min_count below 2 (the spec's rule)
    off = _chat(http, messages=LOOPING, max_tokens=80, max_pattern_size=0, **REPEATING).json()
    assert off["usage"]["completion_tokens"] == 80
    for count in (1, 0, -3):
        off = _chat(http, messages=LOOPING, max_tokens=80, max_pattern_size=8, min_count=count, **REPEATING)
        assert off.status_code == 200, off.text
        assert off.json()["usage"]["completion_tokens"] == 80


def _repeated_4grams(text: str) -> int:
    words = text.split()
    grams = [tuple(words[i:i + 4]) for i in range(len(words) - 3)]
    return len(grams) - len(set(grams))


def test_dry_penalises_repetition(http):
    """SmolLM2 answers LOOPING greedily with one phrase over and over ("la femme au
    roi, la femme au roi, ..." on one CPU, "... au martyre" on another)."""
    def repeats(extra):
        body = _chat(http, messages=LOOPING, max_tokens=80, ignore_eos=True, **extra).json()
        return _repeated_4grams(body["choices"][0]["message"]["content"])

    plain = repeats({})
    assert plain >= 10
    assert repeats({"dry_multiplier": 2.0, "dry_allowed_length": 2, "dry_base": 1.75}) < plain // 2


def test_props_reports_sampling_defaults(http):
    settings = http.get("/props").json()["default_generation_settings"]
    for key in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n", "dry_multiplier",
                "dry_base", "dry_allowed_length", "dry_penalty_last_n", "seed"):
        assert key in settings
