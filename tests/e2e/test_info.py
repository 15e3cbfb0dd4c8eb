"""/health, /, /v1/models, /props, /slots and /metrics on the shared server."""

from __future__ import annotations

import re

import pytest


def test_health_and_root_report_the_spec_fields(http):
    for path in ("/health", "/"):
        body = http.get(path).json()
        assert body["status"] == "ok"
        assert body["model"] == "smollm2-135m-instruct"
        assert body["batch"]["max_batch_size"] == 4
        assert body["context_size"] == 1024
        assert body["tool_call_parser"] is None  # SmolLM2's template has no tools
        assert set(body["observability"]) >= {
            "sequences_started", "sequences_completed", "total_prefill_tokens", "total_decode_tokens",
            "decode_steps_processed", "prefill_chunks_processed", "current_batch_size", "cache_pool_active",
        }


def test_health_counters_move_with_work(http):
    before = http.get("/health").json()["observability"]
    http.post("/completion", json={"prompt": "Count to three:", "n_predict": 5, "temperature": 0,
                                   "ignore_eos": True, "cache_prompt": False})
    after = http.get("/health").json()["observability"]
    assert after["sequences_completed"] == before["sequences_completed"] + 1
    assert after["total_decode_tokens"] >= before["total_decode_tokens"] + 4
    assert after["total_prefill_tokens"] > before["total_prefill_tokens"]


def test_models_lists_the_served_model(http, openai_client):
    body = http.get("/v1/models").json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == ["smollm2-135m-instruct"]
    assert http.get("/models").json()["data"][0]["owned_by"] == "user"
    assert [m.id for m in openai_client.models.list()] == ["smollm2-135m-instruct"]


def test_props_reports_defaults(http):
    body = http.get("/props").json()
    settings = body["default_generation_settings"]
    assert body["total_slots"] == 4
    assert settings["seed"] == 4294967295  # llama-server's LLAMA_DEFAULT_SEED, which a request may send back
    sent_back = http.post("/completion", json={"prompt": "hi", "n_predict": 1, "seed": settings["seed"]})
    assert sent_back.status_code == 200  # a random seed: the answer names the one drawn
    assert 0 <= sent_back.json()["generation_settings"]["seed"] < 4294967295
    # float settings as llama.cpp holds them (float32), as llama-server reports them
    assert settings["temperature"] == pytest.approx(0.8) and settings["top_k"] == 40 and settings["n_predict"] == -1


def test_slots_lists_every_slot(http):
    slots = http.get("/slots").json()
    assert [s["id"] for s in slots] == [0, 1, 2, 3]
    assert all(s["state"] in ("idle", "queued", "decoding") for s in slots)
    assert all(s["context_size"] == 1024 and s["model"] == "smollm2-135m-instruct" for s in slots)


def test_slots_show_llama_servers_task_fields_while_running_and_after(http, server):
    """What llama-server's /slots shows of a slot's task: its id, the prompt's counts,
    the sampling params and next_token; for an idle slot, those of the task it last ran."""
    body = {"prompt": "Count slowly: one, two,", "n_predict": 200, "ignore_eos": True, "id_slot": 3,
            "temperature": 0.3, "top_k": 7, "seed": 42, "cache_prompt": False, "stream": True}
    with server.client() as client, client.stream("POST", "/completion", json=body) as stream:
        lines = stream.iter_lines()
        while not next(lines).startswith("data:"):
            pass
        running = http.get("/slots").json()[3]
        assert running["is_processing"] and running["id_task"] >= 0
        progress = running["next_token"][0]
        assert progress["has_next_token"] and progress["n_decoded"] + progress["n_remain"] == 200
    done = http.post("/completion", json={**body, "stream": False, "n_predict": 5}).json()
    idle = http.get("/slots").json()[3]
    assert not idle["is_processing"] and idle["id_task"] > running["id_task"]
    assert idle["n_prompt_tokens"] == done["tokens_evaluated"]
    assert idle["n_prompt_tokens_processed"] + idle["n_prompt_tokens_cache"] == idle["n_prompt_tokens"]
    assert idle["next_token"] == [{"has_next_token": False, "n_remain": 0, "n_decoded": 5}]
    params = idle["params"]
    assert params["temperature"] == pytest.approx(0.3) and (params["top_k"], params["seed"]) == (7, 42)
    assert params["n_predict"] == 5 and params["ignore_eos"] is True and "top_p" in params
    assert "prompt" not in idle and "generated" not in idle  # as llama-server without --slots-debug
    assert "speculative" in idle


def test_metrics_exposes_the_spec_series(http):
    def value(text, name):
        match = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
        assert match, name
        return float(match.group(1))

    before = http.get("/metrics").text
    assert "# TYPE mlxcel_requests_total counter" in before
    assert "# TYPE mlxcel_batch_sequences_started counter" in before
    assert value(before, "mlxcel_slots_total") == 4
    http.post("/v1/completions", json={"prompt": "Hello", "max_tokens": 3, "temperature": 0})
    after = http.get("/metrics").text
    assert value(after, "mlxcel_requests_total") == value(before, "mlxcel_requests_total") + 1
    assert value(after, "mlxcel_completion_tokens_total") >= value(before, "mlxcel_completion_tokens_total") + 1


def test_decode_tokens_count_verified_drafts(http):
    """With prompt lookup (on by default) a decode step can verify several drafted tokens:
    mlxcel_batch_decode_tokens_total (and /health's total_decode_tokens) count every
    token decode steps generated, each request's but the first, not the steps."""
    def value(name):
        match = re.search(rf"^{name} ([0-9.e+]+)$", http.get("/metrics").text, re.M)
        return float(match.group(1))

    before, health_before = value("mlxcel_batch_decode_tokens_total"), http.get("/health").json()["observability"]
    answer = http.post("/completion", json={"prompt": "1 2 3 4 5 6 7 8 9 10 " * 4, "n_predict": 40,
                                            "temperature": 0, "ignore_eos": True}).json()
    assert answer["timings"]["predicted_n"] == 40 and answer["timings"].get("draft_n_accepted", 0) > 0
    assert value("mlxcel_batch_decode_tokens_total") == before + 39
    health_after = http.get("/health").json()["observability"]
    assert health_after["total_decode_tokens"] == health_before["total_decode_tokens"] + 39
