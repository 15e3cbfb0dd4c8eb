"""llama-server's chat extras on SmolLM2 (the shared server): assistant prefill and
continue_final_message, n choices, timings_per_token, return_progress, __verbose and
POST /apply-template."""

from __future__ import annotations

import json

import pytest

from tests.server_process import ServerProcess

ASK = [{"role": "user", "content": "Reply with a JSON object with a name field for a cat."}]
PREFILL = [*ASK, {"role": "assistant", "content": '{"name": "'}]
GREEDY = {"temperature": 0, "cache_prompt": False}
STORY = [{"role": "user", "content": "Tell me a short story about anything."}]


def _sse(response) -> list[dict]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line.removeprefix("data: ")))
    return events


def _stream(http, **body) -> list[dict]:
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        return _sse(response)


# --- assistant prefill ----------------------------------------------------------

def test_a_final_assistant_message_is_continued_not_repeated(http):
    prompt = http.post("/apply-template", json={"messages": PREFILL}).json()["prompt"]
    assert prompt.endswith('<|im_start|>assistant\n{"name": "')  # no end of turn after the prefill
    reply = http.post("/v1/chat/completions", json={"messages": PREFILL, "max_tokens": 8, **GREEDY}).json()
    content = reply["choices"][0]["message"]["content"]
    # as llama-server answers: the whole message, the continued text once, then the new text
    assert content.startswith('{"name": "') and len(content) > len('{"name": "')
    assert not content[len('{"name": "'):].startswith('{"name"')
    answered = http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 8, **GREEDY}).json()
    assert answered["choices"][0]["message"]["content"] != content
    events = _stream(http, messages=PREFILL, max_tokens=8, **GREEDY)
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]) == content
    # vLLM's spelling of the same continuation
    vllm = http.post("/v1/chat/completions", json={"messages": PREFILL, "max_tokens": 8, **GREEDY,
                                                   "continue_final_message": True,
                                                   "add_generation_prompt": False}).json()
    assert vllm["choices"][0]["message"]["content"] == content


@pytest.mark.parametrize("extra, message", [
    ({"continue_final_message": True}, "Cannot set both add_generation_prompt and continue_final_message to true."),
    ({"continue_final_message": True, "add_generation_prompt": True},
     "Cannot set both add_generation_prompt and continue_final_message to true."),
])
def test_contradicting_flags_are_llama_servers_400(http, extra, message):
    for path in ("/v1/chat/completions", "/apply-template"):
        response = http.post(path, json={"messages": PREFILL, "max_tokens": 2, **extra})
        assert response.status_code == 400
        assert response.json()["error"]["message"] == message
        assert response.json()["error"]["type"] == "invalid_request_error"


def test_two_trailing_assistant_messages_are_refused(http):
    messages = [*PREFILL, {"role": "assistant", "content": "x"}]
    response = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 2})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Cannot have 2 or more assistant messages at the end of the list."


# --- /apply-template ---------------------------------------------------------------

def test_apply_template_is_the_prompt_chat_generates_from(http):
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Name a colour."}]
    prompt = http.post("/apply-template", json={"messages": messages}).json()["prompt"]
    assert "Be terse." in prompt and "Name a colour." in prompt and prompt.endswith("<|im_start|>assistant\n")
    n_tokens = len(http.post("/tokenize", json={"content": prompt}).json()["tokens"])
    reply = http.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 1, **GREEDY}).json()
    assert reply["usage"]["prompt_tokens"] in (n_tokens, n_tokens + 1)  # + BOS when the template has none
    without = http.post("/apply-template", json={"messages": messages, "add_generation_prompt": False}).json()
    assert prompt.startswith(without["prompt"]) and not without["prompt"].endswith("<|im_start|>assistant\n")
    assert http.post("/apply-template", json={"messages": "x"}).status_code == 400


# --- n choices -----------------------------------------------------------------------

def test_n_choices_whole(http):
    body = {"messages": STORY, "max_tokens": 6, "n": 3, "temperature": 1.5, "seed": 7, "ignore_eos": True,
            "cache_prompt": False}
    reply = http.post("/v1/chat/completions", json=body).json()
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    assert all(c["message"]["content"] and c["finish_reason"] == "length" for c in reply["choices"])
    assert reply["usage"]["completion_tokens"] == 18  # summed over the choices; the prompt counted once
    assert len({c["message"]["content"] for c in reply["choices"]}) > 1  # each its own draw (seed + index)
    again = http.post("/v1/chat/completions", json=body).json()
    assert [c["message"]["content"] for c in again["choices"]] == [c["message"]["content"] for c in reply["choices"]]


def test_n_choices_streamed(http):
    events = _stream(http, messages=ASK, max_tokens=5, n=3, temperature=1.0, seed=3, ignore_eos=True,
                     stream_options={"include_usage": True})
    texts = {0: "", 1: "", 2: ""}
    finishes = {}
    for event in events[:-1]:
        (choice,) = event["choices"]
        texts[choice["index"]] += choice["delta"].get("content") or ""
        if choice["finish_reason"]:
            finishes[choice["index"]] = choice["finish_reason"]
    assert finishes == {0: "length", 1: "length", 2: "length"} and all(texts.values())
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 15


def test_n_above_the_slot_count_is_llama_servers_400(http):
    response = http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 2, "n": 5})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Field 'n': Value must be between 1 <= value <= 4, but got 5"


# --- timings_per_token and return_progress ---------------------------------------------

TIMING_FIELDS = {"cache_n", "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
                 "predicted_ms", "predicted_per_token_ms", "predicted_per_second"}


def test_timings_per_token_on_every_chunk(http):
    events = _stream(http, messages=ASK, max_tokens=6, ignore_eos=True, timings_per_token=True, **GREEDY)
    content = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert content and all(set(e["timings"]) >= TIMING_FIELDS for e in content)
    counts = [e["timings"]["predicted_n"] for e in content]
    assert counts == sorted(counts) and counts[0] >= 1
    final = next(e for e in events if e["choices"] and e["choices"][0]["finish_reason"])
    assert final["timings"]["predicted_n"] == 6 and final["timings"]["prompt_n"] > 0
    assert content[0]["timings"]["prompt_n"] == final["timings"]["prompt_n"]
    plain = _stream(http, messages=ASK, max_tokens=3, **GREEDY)
    assert not any("timings" in e for e in plain)  # absent on plain decode (the spec)


def test_return_progress_streams_prefill_progress_before_content(http):
    long_ask = [{"role": "user", "content": "Summarise: " + "the cat sat on the mat. " * 100}]
    events = _stream(http, messages=long_ask, max_tokens=3, return_progress=True, **GREEDY)
    progress = [e for e in events if "prompt_progress" in e]
    first_content = next(i for i, e in enumerate(events) if e["choices"] and e["choices"][0]["delta"].get("content"))
    assert len(progress) >= 2 and all(events.index(p) < first_content for p in progress)
    total = progress[0]["prompt_progress"]["total"]
    assert total > 400
    processed = [p["prompt_progress"]["processed"] for p in progress]
    assert processed == sorted(processed) and processed[-1] == total and processed[0] < total
    assert all(p["prompt_progress"]["cache"] == 0 and p["prompt_progress"]["time_ms"] >= 0 for p in progress)
    assert all(p["choices"][0]["delta"] == {"role": "assistant", "content": None} for p in progress)
    plain = _stream(http, messages=long_ask, max_tokens=2, **GREEDY)
    assert not any("prompt_progress" in e for e in plain)


# --- __verbose -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def verbose_server():
    proc = ServerProcess("-c", "2048", "-np", "1", "--verbose")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def test_verbose_adds_llama_servers_object(verbose_server, http):
    with verbose_server.client() as client:
        reply = client.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 4, "ignore_eos": True,
                                                          **GREEDY}).json()
        events = _stream(client, messages=ASK, max_tokens=4, **GREEDY)
    verbose = reply["__verbose"]
    assert verbose["stop"] is True and verbose["tokens_predicted"] == reply["usage"]["completion_tokens"]
    assert verbose["tokens_evaluated"] == reply["usage"]["prompt_tokens"] and verbose["stop_type"] == "limit"
    assert verbose["content"] == reply["choices"][0]["message"]["content"] and len(verbose["tokens"]) == 4
    assert "Reply with a JSON object" in verbose["prompt"] and verbose["generation_settings"]["n_predict"] == 4
    assert set(verbose["timings"]) >= TIMING_FIELDS
    streamed = [e for e in events if "__verbose" in e]
    assert len(streamed) == 1 and streamed[0]["__verbose"]["content"] == ""  # the stream already sent it
    # off on a server without --verbose, on for a request that asks
    assert "__verbose" not in http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 1}).json()
    asked = http.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 1, "verbose": True}).json()
    assert asked["__verbose"]["tokens_predicted"] == 1


# --- Responses: llama-server's timing fields on streamed events ------------------------

def _response_events(http, **body) -> list[dict]:
    body = {"input": "Name a colour.", "max_output_tokens": 5, "temperature": 0, "stream": True, **body}
    with http.stream("POST", "/v1/responses", json=body) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line.removeprefix("data: ")) for line in response.iter_lines()
                if line.startswith("data: ")]


def test_responses_stream_carries_llama_servers_timings(http):
    events = _response_events(http)
    assert set(events[-1]["timings"]) >= TIMING_FIELDS and events[-1]["timings"]["predicted_n"] > 0
    assert not any("timings" in e for e in events[:-1])
    events = _response_events(http, timings_per_token=True, return_progress=True)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all(set(e["timings"]) >= TIMING_FIELDS for e in deltas)
    progress = [e for e in events if "prompt_progress" in e]
    assert progress and all(e["type"] == "response.in_progress" for e in progress)
    assert progress[-1]["prompt_progress"]["processed"] == progress[-1]["prompt_progress"]["total"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
