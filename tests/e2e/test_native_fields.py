"""llama-server's remaining per-request fields on the shared SmolLM2 server: n_cmpl
(and `n` on /v1/completions), response_fields, n_indent and t_max_predict_ms (the
code-completion stops), sse_ping_interval and lora."""

from __future__ import annotations

import time

PROMPT = "The capital of France is"
GREEDY = {"temperature": 0, "n_predict": 6}
CODE = "def fizzbuzz(n):\n    for i in range(1, n + 1):\n"


def test_n_cmpl_gives_each_prompt_its_completions_in_order(http):
    body = http.post("/completion", json={"prompt": ["The capital of France is", "Once upon a time"],
                                         "n_cmpl": 2, **GREEDY}).json()
    assert [b["index"] for b in body] == [0, 1, 2, 3]
    assert body[0]["content"] == body[1]["content"] != body[2]["content"] == body[3]["content"]
    alias = http.post("/completion", json={"prompt": PROMPT, "n": 2, **GREEDY}).json()
    assert len(alias) == 2 and alias[0]["content"] == body[0]["content"]
    too_many = http.post("/completion", json={"prompt": PROMPT, "n_cmpl": 5, **GREEDY})
    assert too_many.status_code == 400 and "n_cmpl" in too_many.json()["error"]["message"]


def test_n_on_legacy_completions_counts_the_prompt_once(http):
    one = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "temperature": 0}).json()
    three = http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "n": 3, "temperature": 0.9,
                                               "seed": 5}).json()
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    assert three["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    assert three["usage"]["completion_tokens"] == 12


def test_a_seeded_request_draws_each_completion_with_its_own_seed(http):
    """llama-server's child tasks: completion j of a prompt samples with seed + j, so a
    seeded n > 1 gives different choices, and the same request gives them again."""
    sampled = {"temperature": 1.5, "seed": 7, "ignore_eos": True, "cache_prompt": False}
    legacy = {"prompt": "Once upon a time", "max_tokens": 8, "n": 3, **sampled}
    texts = [c["text"] for c in http.post("/v1/completions", json=legacy).json()["choices"]]
    assert len(set(texts)) > 1
    assert [c["text"] for c in http.post("/v1/completions", json=legacy).json()["choices"]] == texts
    native = {"prompt": ["Once upon a time", PROMPT], "n_predict": 8, "n_cmpl": 2, **sampled}
    bodies = http.post("/completion", json=native).json()
    assert [b["generation_settings"]["seed"] for b in bodies] == [7, 8, 7, 8]
    assert bodies[0]["content"] != bodies[1]["content"] and bodies[2]["content"] != bodies[3]["content"]
    assert [b["content"] for b in http.post("/completion", json=native).json()] == [b["content"] for b in bodies]


def test_response_fields_trim_the_answer(http):
    body = http.post("/completion", json={"prompt": PROMPT, **GREEDY,
                                          "response_fields": ["content", "generation_settings/n_predict", "nope"]})
    assert body.json() == {"content": body.json()["content"], "generation_settings/n_predict": 6}


def test_n_indent_stops_at_the_first_line_indented_less(http):
    free = http.post("/completion", json={"prompt": CODE, "temperature": 0, "n_predict": 48}).json()
    assert "\n" in free["content"]  # the model writes several lines here
    body = http.post("/completion", json={"prompt": CODE, "temperature": 0, "n_predict": 48,
                                          "n_indent": 100}).json()
    first, _, rest = body["content"].partition("\n")
    assert first == free["content"].partition("\n")[0]
    assert rest.strip() == ""  # the next non-blank line is cut before its first character (blank lines stay)
    assert body["stop_type"] == "limit" and body["tokens_predicted"] < 48


def test_t_max_predict_ms_stops_at_a_newline_once_the_time_is_up(http):
    body = http.post("/completion", json={"prompt": CODE, "temperature": 0, "n_predict": 64, "ignore_eos": True,
                                          "t_max_predict_ms": 1}).json()
    assert body["content"].endswith("\n") and body["content"].count("\n") <= 2
    assert body["stop_type"] == "limit" and body["tokens_predicted"] < 64


def test_sse_pings_keep_a_silent_stream_alive(http):
    long_prompt = "The history of the city, told slowly. " * 95  # seconds of prefill before a token
    started = time.monotonic()
    with http.stream("POST", "/completion", json={"prompt": long_prompt, "n_predict": 2, "stream": True,
                                                   "sse_ping_interval": 1}) as response:
        raw = b"".join(response.iter_raw())
    elapsed = time.monotonic() - started
    frames = raw.split(b"\n\n")
    if elapsed > 1.5:  # the prefill outlasted the interval: a ping came before the first token
        assert frames[0] == b":", frames[:2]
    assert frames[-2].startswith(b"data: ") and b'"stop":true' in frames[-2]
    with http.stream("POST", "/completion", json={"prompt": PROMPT, "n_predict": 2, "stream": True,
                                                   "sse_ping_interval": -1}) as response:
        assert b"\n:\n" not in b"\n" + b"".join(response.iter_raw())


def test_lora_entries_are_refused_without_adapters(http):
    assert http.post("/completion", json={"prompt": PROMPT, **GREEDY, "lora": []}).status_code == 200
    refused = http.post("/completion", json={"prompt": PROMPT, **GREEDY, "lora": [{"id": 0, "scale": 0.5}]})
    assert refused.status_code == 400 and "LoRA" in refused.json()["error"]["message"]


def _events(http, body: dict) -> list[dict]:
    import json

    with http.stream("POST", "/completion", json={**body, "stream": True}) as response:
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def test_return_progress_and_timings_per_token_on_the_native_stream(http):
    prompt = "A new prompt about rivers and mountains, " * 12
    events = _events(http, {"prompt": prompt, "n_predict": 3, "temperature": 0, "return_progress": True,
                            "timings_per_token": True, "cache_prompt": False})
    progress = [e for e in events if "prompt_progress" in e]
    tokens = [e for e in events if not e["stop"] and "prompt_progress" not in e]
    assert progress and events.index(progress[-1]) < events.index(tokens[0])  # progress comes first
    last = progress[-1]["prompt_progress"]
    assert last["processed"] == last["total"] == progress[0]["tokens_evaluated"]
    assert all(e["tokens_predicted"] == 0 and e["content"] == "" for e in progress)
    assert [e["timings"]["predicted_n"] for e in tokens] == list(range(1, len(tokens) + 1))
    assert all(e["timings"]["prompt_n"] == last["total"] - last["cache"] for e in tokens)
    plain = _events(http, {"prompt": prompt, "n_predict": 3, "temperature": 0})
    assert not any("prompt_progress" in e or ("timings" in e and not e["stop"]) for e in plain)


def test_id_slot_runs_the_request_in_that_slot(http):
    for slot in (2, 0, 3):
        body = http.post("/completion", json={"prompt": PROMPT, **GREEDY, "id_slot": slot}).json()
        assert body["id_slot"] == slot
    missing = http.post("/completion", json={"prompt": PROMPT, **GREEDY, "id_slot": 9})
    assert missing.status_code == 400 and "id_slot" in missing.json()["error"]["message"]
    # every chunk of a stream names its slot, progress chunks included, as llama-server's do
    for slot in (3, 1):
        events = _events(http, {"prompt": PROMPT, **GREEDY, "id_slot": slot, "return_progress": True})
        assert len(events) > 3 and {e["id_slot"] for e in events} == {slot}


def test_chat_input_tokens_counts_the_rendered_prompt(http):
    messages = [{"role": "user", "content": "Count me, please."}]
    rendered = http.post("/apply-template", json={"messages": messages}).json()["prompt"]
    expected = len(http.post("/tokenize", json={"content": rendered, "add_special": True}).json()["tokens"])
    for path in ("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"):
        body = http.post(path, json={"messages": messages}).json()
        assert body == {"object": "response.input_tokens", "input_tokens": expected}
    assert http.post("/v1/chat/completions/input_tokens", json={"messages": "nope"}).status_code == 400


def test_admin_routes_answer_as_llama_server_does_without_their_features(http):
    for path in ("/slots/0?action=erase", "/props"):
        answer = http.post(path, json={})
        assert answer.status_code == 501 and answer.json()["error"]["type"] == "not_supported_error"
    assert http.get("/lora-adapters").json() == []
    assert http.post("/lora-adapters", json=[]).json() == {"success": True}  # llama-server's answer
    assert http.post("/lora-adapters", json=[{"id": 0, "scale": 1}]).status_code == 400
    assert http.post("/lora-adapters", content=b"[NaN]").status_code == 400
