"""Many models in one server (`mlxcel serve --config FILE`), end to end on real models:
SmolLM2-135M, Qwen2.5-Coder-0.5B and Gemma-3-270M served together. Addressing by id,
alias and profile on every generation route, lazy loads, LRU unloads at the model
cap, pins, keeps, /unload (409 while streaming), /v1/reload while streaming."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.server_process import ServerProcess

CONFIG = """
server:
  max_models: 2
  defaults:
    model: smol
    ttl_s: 0
profiles:
  terse:
    system: "Answer with one word."
    sampling: {max_tokens: 3, temperature: 0}
models:
  smol:
    path: smollm2-135m-instruct
    ctx_size: 2048
    parallel: 2
    pin: true
  coder:
    path: qwen2.5-coder-0.5b-instruct
    ctx_size: 2048
    parallel: 2
  gemma:
    path: gemma-3-270m
    ctx_size: 1024
    parallel: 1
aliases:
  tiny: smol
  short: smol@terse
"""

GREEDY = {"temperature": 0, "max_tokens": 8}
QUESTION = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    path = tmp_path_factory.mktemp("fleet") / "mlxcel.yaml"
    path.write_text(CONFIG)
    proc = ServerProcess("--config", str(path), model=None)
    try:
        proc.wait_ready(health_path="/health?ready=1")
        proc.config_path = path
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def client(fleet):
    with fleet.client() as c:
        yield c


def chat(client: httpx.Client, model: str | None, **fields) -> httpx.Response:
    body = {"messages": QUESTION, **GREEDY, **fields}
    if model is not None:
        body["model"] = model
    return client.post("/v1/chat/completions", json=body)


def models(client: httpx.Client) -> dict[str, dict]:
    return {row["id"]: row for row in client.get("/v1/models").json()["data"]}


def test_models_lists_ids_and_aliases_with_markers(client):
    rows = models(client)
    assert set(rows) == {"smol", "coder", "gemma", "tiny", "short"}
    assert rows["smol"]["default"] and rows["smol"]["pinned"] and rows["smol"]["resident"]
    assert not rows["gemma"]["pinned"] and not rows["coder"]["default"]
    assert rows["short"]["alias_of"] == "smol@terse" and rows["short"]["profile"] == "terse"
    # llama-server's router fields: a model's aliases, and what it takes in
    assert "short" in rows["smol"]["aliases"] and rows["short"]["aliases"] == []
    assert rows["smol"]["architecture"] == {"input_modalities": ["text"], "output_modalities": ["text"]}
    assert rows["smol"]["source"] == "preset" and rows["smol"]["can_remove"] is False  # a config entry
    assert rows["smol"]["context_length"] == 1024  # 2048 over 2 slots
    for row in rows.values():
        assert {"speculative", "vlm", "max_context_at_width_1"} <= set(row)
    # every model drafts by prompt lookup, the server's default: /v1/models says so, as /v1/metrics does
    assert all(row["speculative"] is True for row in rows.values())
    metrics = client.get("/v1/metrics").json()
    assert {m["id"]: m["speculative"] for m in metrics["server"]["resident_models"]}["smol"] is True


def test_each_model_answers_as_it_does_alone(client, http, qwen):
    """Greedy output per model equals the single-model servers' (and the two differ)."""
    smol = chat(client, "smol").json()["choices"][0]["message"]["content"]
    coder = chat(client, "coder").json()["choices"][0]["message"]["content"]
    body = {"messages": QUESTION, **GREEDY}
    assert smol == http.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    with qwen.client() as alone:
        assert coder == alone.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    assert smol != coder


def test_answers_name_the_model_that_served_them(client):
    assert chat(client, "coder").json()["model"] == "coder"
    assert chat(client, "tiny").json()["model"] == "smol"
    assert chat(client, None).json()["model"] == "smol"  # empty model: the default
    assert chat(client, "").json()["model"] == "smol"


def test_unknown_model_is_404_with_the_available_ids(client):
    response = chat(client, "no-such-model")
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["type"] == "model_not_found"
    assert {"smol", "coder", "gemma", "tiny", "short"} <= set(error["available_models"])
    # an unknown @suffix is not a profile: the whole string is an id
    assert chat(client, "smol@nonsense").status_code == 404
    # a client's long name is echoed cut
    long_name = chat(client, "x" * 100_000)
    assert long_name.status_code == 404 and len(long_name.text) < 2_000
    assert "(100000 characters)" in long_name.json()["error"]["message"]
    # Anthropic's shape on /v1/messages, the served ids in it all the same
    messages = client.post("/v1/messages", json={"model": "no-such-model", "max_tokens": 2, "messages": QUESTION})
    assert messages.status_code == 404
    assert messages.json()["type"] == "error" and messages.json()["error"]["type"] == "not_found_error"
    assert {"smol", "coder", "gemma"} <= set(messages.json()["error"]["available_models"])


def test_unknown_profile_is_400_listing_valid_ones(client):
    response = chat(client, "smol", profile="nonsense")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "unknown_profile" and "terse" in error["valid_profiles"]
    assert "coding" in error["valid_profiles"]  # the built-in intents


def test_profile_defaults_apply_and_request_fields_win(client):
    short = client.post("/v1/chat/completions", json={"model": "short", "messages": QUESTION}).json()
    assert short["usage"]["completion_tokens"] <= 3
    longer = client.post("/v1/chat/completions",
                         json={"model": "short", "messages": QUESTION, "max_tokens": 12, "temperature": 0}).json()
    assert longer["usage"]["completion_tokens"] > 3
    # the profile's system prompt is in the prompt only when the request has none
    explicit = client.post("/v1/chat/completions", json={
        "model": "smol", "messages": [{"role": "system", "content": "Answer with one word."}, *QUESTION],
        **GREEDY}).json()
    assert short["usage"]["prompt_tokens"] == explicit["usage"]["prompt_tokens"]
    assert chat(client, "smol").json()["usage"]["prompt_tokens"] != explicit["usage"]["prompt_tokens"]
    with_system = client.post("/v1/chat/completions", json={
        "model": "short", "messages": [{"role": "system", "content": "Be brief."}, *QUESTION]}).json()
    own = client.post("/v1/chat/completions", json={
        "model": "smol", "messages": [{"role": "system", "content": "Be brief."}, *QUESTION], **GREEDY}).json()
    assert with_system["usage"]["prompt_tokens"] == own["usage"]["prompt_tokens"]


def test_id_at_profile_and_profile_field_select_the_profile(client):
    by_suffix = client.post("/v1/chat/completions", json={"model": "smol@terse", "messages": QUESTION}).json()
    by_field = client.post("/v1/chat/completions",
                           json={"model": "smol", "profile": "terse", "messages": QUESTION}).json()
    assert by_suffix["usage"]["completion_tokens"] <= 3 and by_field["usage"]["completion_tokens"] <= 3
    assert by_suffix["choices"][0]["message"]["content"] == by_field["choices"][0]["message"]["content"]


@pytest.mark.parametrize("route, body", [
    ("/v1/completions", {"prompt": "Hello", "max_tokens": 2}),
    ("/completion", {"prompt": "Hello", "n_predict": 2}),
    ("/v1/messages", {"max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}),
    ("/v1/responses", {"input": "Hi", "max_output_tokens": 2}),
])
def test_every_generation_route_addresses_models(client, route, body):
    assert client.post(route, json={**body, "model": "no-such-model"}).status_code == 404
    answer = client.post(route, json={**body, "model": "tiny"})
    assert answer.status_code == 200, answer.text


def test_anthropic_route_speaks_its_own_error_shape(client):
    response = client.post("/v1/messages", json={"model": "nope", "max_tokens": 2,
                                                 "messages": [{"role": "user", "content": "Hi"}]})
    assert response.status_code == 404 and response.json()["type"] == "error"


def test_a_model_loads_on_its_first_request_and_lru_unloads_at_the_cap(client):
    client.post("/unload", json={})  # idle models go; the pinned one too, and comes back on use
    assert chat(client, "smol").status_code == 200
    assert chat(client, "coder").status_code == 200
    rows = models(client)
    assert rows["coder"]["resident"] and not rows["gemma"]["resident"]
    started = time.monotonic()
    assert chat(client, "gemma", max_tokens=2).status_code == 200
    assert time.monotonic() - started < 60
    rows = models(client)
    assert rows["gemma"]["resident"]
    # max_models 2: the least recently used unpinned model made room; the pinned one stayed
    assert rows["smol"]["resident"] and not rows["coder"]["resident"]
    # a route that describes a loaded model, asked of one that is not: a 400 saying so, not a "busy" 503
    for path in ("/slots?model=coder", "/props?model=coder"):
        answer = client.get(path)
        assert answer.status_code == 400 and answer.json()["error"]["code"] == "model_not_loaded", answer.text


def _stream_in_background(fleet, model: str, tokens: int) -> tuple[threading.Thread, list]:
    chunks: list = []

    def run() -> None:
        with fleet.client() as c, c.stream("POST", "/v1/chat/completions", json={
                "model": model, "messages": QUESTION, "max_tokens": tokens, "temperature": 0,
                "ignore_eos": True, "stream": True}) as response:
            for line in response.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunks.append(json.loads(line[6:]))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, chunks


def _wait_streaming(chunks: list) -> None:
    deadline = time.monotonic() + 60
    while len(chunks) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(chunks) >= 3


def test_unload_refuses_a_streaming_model_with_409(fleet, client):
    thread, chunks = _stream_in_background(fleet, "smol", 200)
    try:
        _wait_streaming(chunks)
        busy = client.post("/unload", json={"model": "smol"})
        assert busy.status_code == 409
        assert busy.json()["error"]["type"] == "conflict_error"
    finally:
        thread.join()
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    # the stream's lease ends just after its last byte, which the client may read first
    deadline = time.monotonic() + 5
    while (idle := client.post("/unload", json={"model": "smol"})).status_code == 409 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert idle.json()["unloaded"] == ["smol"]
    assert not models(client)["smol"]["resident"]
    assert chat(client, "smol").status_code == 200  # loads again, still pinned
    assert models(client)["smol"]["pinned"]


def test_keep_loads_and_marks_a_model(client):
    kept = client.post("/v1/keep", json={"model": "gemma"})
    assert kept.status_code == 200 and kept.json()["kept"] and kept.json()["resident"]
    assert models(client)["gemma"]["kept"]
    released = client.post("/v1/keep", json={"model": "gemma", "keep": False})
    assert released.status_code == 200 and not models(client)["gemma"]["kept"]
    # warm: false loads it too, answering at once instead of once it is warm
    assert client.post("/unload", json={"model": "gemma"}).status_code == 200
    assert not models(client)["gemma"]["resident"]
    cold = client.post("/v1/keep", json={"model": "gemma", "warm": False})
    assert cold.status_code == 200 and cold.json()["kept"]
    assert models(client)["gemma"]["kept"]
    deadline = time.monotonic() + 120
    while not models(client)["gemma"]["resident"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert client.post("/v1/keep", json={"model": "gemma", "keep": False}).status_code == 200
    assert client.post("/v1/keep", json={"model": "nope"}).status_code == 404
    assert client.post("/v1/keep", json={}).status_code == 400
    assert client.post("/v1/keep", json={"model": "gemma", "warm": "yes"}).status_code == 400


def test_reload_keeps_unchanged_models_and_never_drops_a_stream(fleet, client):
    assert chat(client, "smol").status_code == 200
    thread, chunks = _stream_in_background(fleet, "smol", 120)
    try:
        _wait_streaming(chunks)
        changed = CONFIG.replace("ctx_size: 2048\n    parallel: 2\n    pin: true", "ctx_size: 1024\n    parallel: 2\n    pin: true")
        changed = changed.replace("max_tokens: 3", "max_tokens: 4")
        fleet.config_path.write_text(changed)
        answer = client.post("/v1/reload")
        assert answer.status_code == 200, answer.text
        assert "smol" in answer.json()["unloaded"]
    finally:
        thread.join()
        fleet.config_path.write_text(CONFIG)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"  # the stream ran to its end
    assert chat(client, "smol").status_code == 200
    assert models(client)["smol"]["context_length"] == 512  # reloaded with the new context
    assert client.post("/v1/reload").status_code == 200
    assert chat(client, "smol").status_code == 200


def test_reload_of_a_broken_file_keeps_serving(fleet, client):
    fleet.config_path.write_text(CONFIG + "\nbogus_key: 1\n")
    try:
        answer = client.post("/v1/reload")
        assert answer.status_code == 400 and "bogus_key" in answer.json()["error"]["message"]
    finally:
        fleet.config_path.write_text(CONFIG)
    assert chat(client, "smol").status_code == 200


def test_health_is_liveness_and_ready_gives_a_verdict(client):
    health = client.get("/health").json()
    assert health["status"] == "healthy" and isinstance(health["pid"], int)
    ready = client.get("/health?ready=1")
    assert ready.status_code == 200 and ready.json()["ready"] is True


def test_hostile_model_fields_are_400(client):
    for value in (123, ["smol"], {"id": "smol"}, True):
        assert chat(client, value).status_code == 400
    assert client.post("/v1/chat/completions", json={"model": "smol", "profile": 5,
                                                     "messages": QUESTION}).status_code == 400
    assert client.post("/unload", content=b"{not json").status_code == 400
    assert client.post("/unload", json=[1]).status_code == 400
    lone = b'{"model": "\\ud800"}'  # a lone surrogate: refused at the edge, never echoed into a 500
    for route in ("/unload", "/v1/keep", "/v1/cache/reset"):
        assert client.post(route, content=lone, headers={"content-type": "application/json"}).status_code == 400
    assert client.post("/unload", content=b"[" * 5000 + b"]" * 5000).status_code in (400, 413)


def test_the_shipped_example_config_serves(tmp_path):
    """examples/mlxcel.yaml, as the README shows it: every id and alias listed, the
    embeddings role beside them, a preloaded model and an alias with a profile answering."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "mlxcel.yaml"
    proc = ServerProcess("--config", str(example), model=None)
    try:
        proc.wait_ready(health_path="/health?ready=1")
        with proc.client() as c:
            rows = {row["id"]: row for row in c.get("/v1/models").json()["data"]}
            assert {"smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "gemma-3-270m", "coder", "reviewer",
                    "small", "tiny"} <= set(rows)
            assert rows["smollm2-135m-instruct"]["default"] and rows["smollm2-135m-instruct"]["pinned"]
            assert rows["coder"]["alias_of"] == "qwen2.5-coder-0.5b-instruct@coding"
            deadline = time.monotonic() + 120  # the preload runs after the pinned model
            while not models(c)["qwen2.5-coder-0.5b-instruct"]["resident"] and time.monotonic() < deadline:
                time.sleep(0.2)
            answer = c.post("/v1/chat/completions", json={"model": "coder", "messages": QUESTION, "max_tokens": 4})
            assert answer.status_code == 200 and answer.json()["model"] == "qwen2.5-coder-0.5b-instruct"
            assert c.post("/v1/embeddings", json={"input": "hi"}).status_code == 200
    finally:
        proc.stop()
