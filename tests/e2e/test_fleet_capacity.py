"""Capacity, metrics, estimates and the memory governor with many models, on real
models: /v1/metrics fields moving under load, /v1/estimate and dry runs checked
against what the request then does, /v1/capacity/plan, model_load_deferred under a
residency budget, the embeddings role addressed like a model, keepalives while a
model loads, and a request shed by the governor under a small budget."""

from __future__ import annotations

import json
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.server_process import ServerProcess

# smollm (pinned) and qwen fit the budget together; gemma fits only in qwen's place
CONFIG = """
server:
  budget_gb: 1.15
  defaults: {model: smol, ttl_s: 0}
  embeddings: all-minilm-l6-v2
models:
  smol: {path: smollm2-135m-instruct, ctx_size: 2048, parallel: 2, pin: true}
  coder: {path: qwen2.5-coder-0.5b-instruct, ctx_size: 2048, parallel: 1}
  gemma: {path: gemma-3-270m, ctx_size: 1024, parallel: 1}
"""

QUESTION = [{"role": "user", "content": "Name a colour."}]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    path = tmp_path_factory.mktemp("fleet-capacity") / "mlxcel.yaml"
    path.write_text(CONFIG)
    proc = ServerProcess("--config", str(path), model=None, env={"MLXCEL_SSE_KEEPALIVE_S": "0.1"})
    try:
        proc.wait_ready(health_path="/health?ready=1")
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def client(fleet):
    with fleet.client() as c:
        yield c


def _stream(fleet, body: dict, route: str = "/v1/chat/completions") -> tuple[threading.Thread, list[str]]:
    lines: list[str] = []

    def run() -> None:
        with fleet.client() as c, c.stream("POST", route, json={**body, "stream": True}) as response:
            for line in response.iter_lines():
                lines.append(line)  # noqa: PERF402 - line by line: the test reads them as they come

    thread = threading.Thread(target=run)
    thread.start()
    return thread, lines


def _data(lines: list[str]) -> list[dict]:
    return [json.loads(line[6:]) for line in lines if line.startswith("data: {")]


def _wait(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_metrics_sections_move_under_load(fleet, client):
    idle = client.get("/v1/metrics").json()["server"]
    for section in ("concurrency", "queue", "requests", "resident_models", "governor", "memory", "capacity",
                    "rates"):
        assert section in idle, section
    assert idle["concurrency"]["in_flight"] == 0 and idle["requests"] == []
    assert [m["id"] for m in idle["resident_models"]] == ["smol"] and idle["resident_models"][0]["pinned"]
    assert idle["memory"]["total_bytes"] > 0 and idle["memory"]["weights_bytes"] > 0
    assert idle["capacity"]["models"]["smol"]["max_ctx"]
    thread, lines = _stream(fleet, {"model": "smol", "messages": QUESTION, "max_tokens": 200, "ignore_eos": True,
                                    "temperature": 0})
    try:
        _wait(lambda: len(_data(lines)) >= 40)  # the engine publishes every 0.1 s
        busy = client.get("/v1/metrics").json()["server"]
        assert busy["concurrency"]["in_flight"] == 1
        (row,) = busy["requests"]
        assert row["model"] == "smol" and row["state"] == "decode" and row["generated"] >= 1
        assert row["max_tokens"] == 200
        assert busy["rates"]["decode_tok_s"] > 0, json.dumps([row, busy["rates"]])
    finally:
        thread.join()
    after = client.get("/v1/metrics").json()["server"]
    assert after["rates"]["decode_tok_s_lifetime"] > 0 and after["requests"] == []


def test_metrics_prometheus_form_parses_with_model_labels(client):
    text = client.get("/v1/metrics?format=prometheus").text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert "mlxcel_concurrency_in_flight" in families
    bands = {s.labels["band"]: s.value for s in families["mlxcel_governor_band"].samples}
    assert sum(bands.values()) == 1
    labelled = [s for f in families.values() for s in f.samples if s.labels.get("model") == "smol"]
    assert labelled
    assert client.get("/metrics").status_code == 200  # many models: /metrics is the snapshot's gauges
    assert "server" in client.get("/metrics?format=json").json()
    assert client.get("/v1/metrics?format=xml").status_code == 400


def test_estimate_matches_what_the_request_then_does(client):
    body = {"model": "smol", "messages": QUESTION, "max_tokens": 4, "temperature": 0}
    estimate = client.post("/v1/estimate", json=body).json()
    counted = client.post("/v1/chat/completions/input_tokens", json=body).json()["input_tokens"]
    assert estimate["resident"] and estimate["prompt_tokens"] == counted
    assert estimate["context_ok"] and estimate["context_limit"] == 1024 and estimate["need_bytes"] > 0
    answer = client.post("/v1/chat/completions", json=body).json()
    assert answer["usage"]["prompt_tokens"] == estimate["prompt_tokens"]
    again = client.post("/v1/estimate", json=body).json()
    assert again["warm_tokens"] > 0 and again["cache_tier"] in ("slot", "exact", "block")
    assert again["est_ttft_s"] is not None
    too_long = client.post("/v1/estimate", json={**body, "max_tokens": 5000}).json()
    assert too_long["context_ok"] is False
    refused = client.post("/v1/chat/completions", json={**body, "max_tokens": 5000})
    assert refused.status_code == 400
    assert refused.json()["error"]["message"].startswith("prompt is too long")  # what agent clients look for


def test_dry_run_and_estimate_never_load_a_model(client):
    client.post("/unload", json={"model": "gemma"})
    body = {"model": "gemma", "messages": QUESTION, "max_tokens": 4}
    estimate = client.post("/v1/estimate", json=body).json()
    assert estimate["resident"] is False and estimate["prompt_tokens"] > 0
    dry = client.post("/v1/chat/completions", json={**body, "dry_run": True})
    assert dry.status_code == 200 and dry.json()["resident"] is False and "choices" not in dry.json()
    rows = {row["id"]: row for row in client.get("/v1/models").json()["data"]}
    assert not rows["gemma"]["resident"]
    resident_dry = client.post("/v1/chat/completions", json={"model": "smol", "messages": QUESTION,
                                                               "dry_run": True}).json()
    assert resident_dry["resident"] is True and "choices" not in resident_dry
    assert client.post("/v1/estimate", json={"model": "nope", "messages": QUESTION}).status_code == 404


def test_capacity_plan_answers(fleet, client):
    fits = client.get("/v1/capacity/plan?width=1&depth=256").json()
    assert fits["ok"] is True and fits["admit_now"] is True and fits["reason"] == "ok"
    too_deep = client.get("/v1/capacity/plan?width=1&depth=4096").json()
    assert too_deep["ok"] is False and "depth" in too_deep["reason"]
    too_wide = client.get("/v1/capacity/plan?width=3&depth=256").json()
    assert too_wide["ok"] is False
    for query in ("width=0&depth=1", "width=x&depth=1", "depth=1", "width=1&depth=-5"):
        assert client.get(f"/v1/capacity/plan?{query}").status_code == 400
    thread, lines = _stream(fleet, {"model": "smol", "messages": QUESTION, "max_tokens": 150, "ignore_eos": True})
    try:
        _wait(lambda: len(_data(lines)) >= 2)
        both = client.get("/v1/capacity/plan?width=2&depth=256").json()
        assert both["ok"] is True and both["admit_now"] is False  # one of two slots is busy
        one = client.get("/v1/capacity/plan?width=1&depth=256").json()
        assert one["admit_now"] is True
    finally:
        thread.join()


def test_a_load_that_cannot_fit_beside_busy_models_is_deferred(fleet, client):
    assert client.post("/v1/chat/completions", json={"model": "coder", "messages": QUESTION,
                                                     "max_tokens": 2}).status_code == 200
    thread, lines = _stream(fleet, {"model": "coder", "messages": QUESTION, "max_tokens": 120, "ignore_eos": True})
    try:
        _wait(lambda: len(_data(lines)) >= 2)
        deferred = client.post("/v1/chat/completions", json={"model": "gemma", "messages": QUESTION,
                                                             "max_tokens": 2})
        assert deferred.status_code == 503
        error = deferred.json()["error"]
        assert error["type"] == "model_load_deferred" and "budget" in error["message"]
        assert any(word.isdigit() for word in error["message"].replace("-", " ").split())  # the numbers
        assert int(deferred.headers["retry-after"]) > 0
    finally:
        thread.join()
    # once coder is idle, it is evicted (least recently used) to make room
    assert client.post("/v1/chat/completions", json={"model": "gemma", "messages": QUESTION,
                                                     "max_tokens": 2}).status_code == 200
    rows = {row["id"]: row for row in client.get("/v1/models").json()["data"]}
    assert rows["gemma"]["resident"] and not rows["coder"]["resident"] and rows["smol"]["resident"]


def test_keepalives_flow_while_a_model_loads(fleet, client):
    client.post("/unload", json={"model": "gemma"})
    thread, lines = _stream(fleet, {"model": "gemma", "messages": QUESTION, "max_tokens": 2})
    thread.join()
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data: "))
    assert any(line.startswith(":") for line in lines[:first_data]), lines[:5]
    assert _data(lines)[-1]["choices"][0]["finish_reason"] is not None


@pytest.mark.parametrize("route, body", [
    ("/v1/messages", {"max_tokens": 2}),
    ("/v1/responses", {"max_output_tokens": 2}),
    ("/v1/chat/completions", {"max_tokens": 2}),
])
def test_every_stream_sends_keepalives_while_silent(fleet, client, route, body):
    """A long prefill keeps each API's stream silent for a while: comments flow meanwhile."""
    prompt = route + " " + _prompt_of(client, 900)  # its own prompt: none of it is in the cache
    content = {"input": prompt} if route == "/v1/responses" else {"messages": [{"role": "user", "content": prompt}]}
    thread, lines = _stream(fleet, {"model": "smol", **body, **content}, route)
    thread.join()
    assert any(line.startswith(":") for line in lines), lines[:5]
    assert any(line.startswith("data: ") for line in lines)


def test_embeddings_role_is_addressed_like_a_model(client):
    ok = client.post("/v1/embeddings", json={"model": "all-minilm-l6-v2", "input": "hello"})
    assert ok.status_code == 200 and len(ok.json()["data"][0]["embedding"]) == 384
    assert client.post("/v1/embeddings", json={"input": "hello"}).status_code == 200
    missing = client.post("/v1/embeddings", json={"model": "smol-typo", "input": "hello"})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "model_not_found"


def test_cache_reset_one_model_or_all(client):
    client.post("/v1/chat/completions", json={"model": "smol", "messages": QUESTION, "max_tokens": 2})
    one = client.post("/v1/cache/reset", json={"model": "smol"})
    assert one.status_code == 200 and list(one.json()["models"]) == ["smol"]
    everyone = client.post("/v1/cache/reset").json()
    assert "smol" in everyone["models"]
    assert client.post("/v1/cache/reset", json={"model": "nope"}).status_code == 404
    stats = client.get("/v1/cache/stats").json()
    assert "smol" in stats["models"]


def _prompt_of(client, tokens: int) -> str:
    """A prompt of about `tokens` tokens (within 5 %), measured with /tokenize."""
    words = 100
    for _ in range(6):
        text = " ".join(f"item{i}" for i in range(words))
        n = len(client.post("/tokenize", json={"content": text}).json()["tokens"])
        if abs(n - tokens) <= tokens * 0.05:
            return text
        words = max(1, round(words * tokens / n))
    return text


SHED_CONFIG = """
server:
  budget_gb: 0.25
  defaults: {ttl_s: 0}
models:
  smol: {path: smollm2-135m-instruct, ctx_size: 2048, parallel: 1}
"""


def test_the_governor_sheds_the_largest_request_under_a_small_budget(tmp_path):
    """The budget holds SmolLM2 at rest (weights and compute buffers, ~80 %); a prompt
    of ~1,800 tokens takes its KV past 95 % (red): that request is shed, typed, and the
    server goes on."""
    path = tmp_path / "small.yaml"
    path.write_text(SHED_CONFIG)
    proc = ServerProcess("--config", str(path), model=None)
    try:
        proc.wait_ready(health_path="/health?ready=1")
        with proc.client() as client:
            assert client.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 2}).status_code == 200
            long_prompt = _prompt_of(client, 1800)
            response = client.post("/v1/chat/completions", json={
                "messages": [{"role": "user", "content": long_prompt}], "max_tokens": 200})
            assert response.status_code == 503, response.text
            error = response.json()["error"]
            assert error["type"] == "server_overloaded_shed" and error["finish_reason"] == "shed"
            governor = client.get("/v1/metrics").json()["server"]["governor"]
            assert governor["sheds"] >= 1
            _wait(lambda: client.get("/health?ready=1").status_code == 200, timeout=10)
            assert client.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 2}).status_code == 200
    finally:
        proc.stop()


NO_DEFAULT_CONFIG = """
models:
  smol: {path: smollm2-135m-instruct, ctx_size: 1024, parallel: 1, ttl_s: 1}
  coder: {path: qwen2.5-coder-0.5b-instruct, ctx_size: 1024, parallel: 1}
"""


def test_no_default_idle_timeout_and_queue_cap(tmp_path):
    """Two models and no default: an empty `model` is 400; an idle model unloads after
    its ttl_s; past the queue cap, 503 server_overloaded with Retry-After."""
    path = tmp_path / "two.yaml"
    path.write_text(NO_DEFAULT_CONFIG)
    proc = ServerProcess("--config", str(path), "--queue-cap", "1", model=None)
    try:
        proc.wait_ready(health_path="/health?ready=1")
        with proc.client() as client:
            empty = client.post("/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 2})
            assert empty.status_code == 400 and set(empty.json()["error"]["available_models"]) == {"smol", "coder"}
            assert client.post("/v1/chat/completions", json={"model": "smol", "messages": QUESTION,
                                                             "max_tokens": 2}).status_code == 200
            resident = {row["id"]: row["resident"] for row in client.get("/v1/models").json()["data"]}
            assert resident["smol"] and not resident["coder"]
            _wait(lambda: not {r["id"]: r["resident"] for r in client.get("/v1/models").json()["data"]}["smol"],
                  timeout=15)
            body = {"model": "smol", "messages": QUESTION, "max_tokens": 300, "ignore_eos": True}
            first, first_lines = _stream(proc, body)
            _wait(lambda: len(_data(first_lines)) >= 2)
            second, _ = _stream(proc, body)
            _wait(lambda: client.get("/v1/metrics").json()["server"]["queue"]["waiting"] == 1)
            refused = client.post("/v1/chat/completions", json={**body, "max_tokens": 2})
            assert refused.status_code == 503
            assert refused.json()["error"]["type"] == "server_overloaded"
            assert 2 <= int(refused.headers["retry-after"]) <= 60
            queue = client.get("/v1/metrics").json()["server"]["queue"]
            assert queue["rejections"] >= 1 and queue["last_reject_reason"]
            ready = client.get("/health?ready=1")
            assert ready.status_code == 503 and ready.json()["reason"] == "queue" and ready.headers["retry-after"]
            first.join()
            second.join()
    finally:
        proc.stop()
