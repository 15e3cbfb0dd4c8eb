"""llama-server's HTTP surface: its 401 body, CORS answers in its header casing
(checked on the raw wire), --cors-origins, the llamacpp:* metrics and the
Process-Start-Time-Unix header, 501 for /metrics without --metrics, /props and
/v1/models fields, --alias/--tags, --host with several addresses, --api-prefix."""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.wire import ipv6_loopback, raw_request
from tests.server_process import ServerProcess

KEY = "sk-surface"
AUTH = {"Authorization": f"Bearer {KEY}"}
HAS_V6 = ipv6_loopback()
LLAMACPP_COUNTERS = ["prompt_tokens_total", "prompt_tokens_cached_total", "prompt_seconds_total",
                     "tokens_predicted_total", "tokens_predicted_seconds_total", "n_decode_total", "n_tokens_max",
                     "spec_decode_num_draft_tokens_total", "spec_decode_num_accepted_tokens_total",
                     "spec_decode_num_drafts_total"]
LLAMACPP_GAUGES = ["prompt_tokens_seconds", "predicted_tokens_seconds", "requests_processing", "requests_deferred",
                   "n_busy_slots_per_decode"]


@pytest.fixture(scope="module")
def keyed():
    """A key, --metrics, aliases and tags, both loopbacks (IPv6 where the machine has it), default CORS."""
    hosts = "127.0.0.1,::1" if HAS_V6 else "127.0.0.1"
    proc = ServerProcess("-c", "1024", "-np", "1", "--metrics", "--api-key", KEY, "--alias", "zeta, alpha ,zeta",
                         "--tags", "chat,tiny", "--host", hosts)
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def restricted():
    """No --metrics, one allowed CORS origin without credentials, everything under /api."""
    proc = ServerProcess("-c", "512", "-np", "1", "--cors-origins", "https://good.example,https://also.example",
                         "--no-cors-credentials", "--api-prefix", "/api/")
    try:
        yield proc.wait_ready(health_path="/api/health")
    finally:
        proc.stop()


def _metrics(text: str) -> dict[str, tuple[str, float]]:
    types, values = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line.startswith("llamacpp:"):
            name, value = line.split(" ", 1)
            values[name] = (types[name.split("{")[0]], float(value))  # a labeled series: its family's type
    return values


# -- auth ----------------------------------------------------------------------------


@pytest.mark.parametrize("headers, kind", [
    ({}, "missing_api_key"), ({"Authorization": ""}, "missing_api_key"),
    ({"Authorization": "Bearer wrong"}, "invalid_api_key"), ({"x-api-key": "wrong"}, "invalid_api_key")])
def test_missing_or_wrong_key_gets_the_specs_401(keyed, headers, kind):
    with keyed.client() as client:
        response = client.post("/completion", json={"prompt": "x", "n_predict": 1}, headers=headers)
    assert response.status_code == 401
    error = response.json()["error"]
    assert (error["type"], error["code"]) == (kind, kind)
    assert error["message"] == ("Invalid API Key" if kind == "invalid_api_key" else
                                "Missing API key: send it as `Authorization: Bearer KEY`")
    assert response.headers["content-type"] == "application/json; charset=utf-8"


def test_anthropic_routes_keep_anthropics_401_shape(keyed):
    with keyed.client() as client:
        for path in ("/v1/messages", "/v1/messages/count_tokens"):
            response = client.post(path, json={"model": "m", "max_tokens": 1, "messages": []})
            assert response.status_code == 401
            assert response.json() == {"type": "error", "error": {"type": "authentication_error",
                                                                   "message": "Invalid API key"}}


def test_health_paths_are_public_and_the_rest_keyed(keyed):
    with keyed.client() as client:
        for path in ("/health", "/v1/health", "/"):
            assert client.get(path).status_code == 200, path
        for path in ("/props", "/models", "/v1/models", "/metrics", "/slots"):
            assert client.get(path).status_code == 401, path
            assert client.get(path, headers=AUTH).status_code == 200, path


# -- CORS ----------------------------------------------------------------------------


def test_preflight_is_answered_in_llama_servers_casing_without_a_key(keyed):
    status, headers, body = raw_request("127.0.0.1", keyed.port, "OPTIONS", "/v1/chat/completions", {
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 200 and body == b""
    sent = dict(headers)  # names exactly as they went over the wire
    assert sent["Access-Control-Allow-Origin"] == "https://app.example"
    assert sent["Access-Control-Allow-Credentials"] == "true"
    assert sent["Access-Control-Allow-Methods"] == "GET, POST, DELETE, OPTIONS"
    assert sent["Access-Control-Allow-Headers"] == "*"


def test_every_response_echoes_the_origin(keyed):
    for headers, want in (({**AUTH, "Origin": "http://localhost:3000"}, 200), ({"Origin": "http://x.example"}, 401)):
        status, sent, _ = raw_request("127.0.0.1", keyed.port, "GET", "/props", headers)
        assert status == want
        assert dict(sent)["Access-Control-Allow-Origin"] == headers["Origin"]


def test_cors_origins_restricts_the_origins(restricted):
    def allowed(origin: str) -> str | None:
        _, sent, _ = raw_request("127.0.0.1", restricted.port, "OPTIONS", "/api/v1/models", {"Origin": origin})
        sent = dict(sent)
        assert sent["Access-Control-Allow-Credentials"] == "false"
        return sent.get("Access-Control-Allow-Origin")

    assert allowed("https://good.example") == "https://good.example"
    assert allowed("https://also.example") == "https://also.example"
    assert allowed("https://evil.example") is None
    _, sent, _ = raw_request("127.0.0.1", restricted.port, "GET", "/api/health", {"Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in dict(sent)


# -- metrics -------------------------------------------------------------------------


def test_metrics_carry_llama_servers_families(keyed):
    with keyed.client(headers=AUTH) as client:
        client.post("/completion", json={"prompt": "I believe", "n_predict": 4, "temperature": 0})
        response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    values = _metrics(response.text)
    for name in LLAMACPP_COUNTERS:
        assert values[f"llamacpp:{name}"][0] == "counter", name
        assert f"# HELP llamacpp:{name} " in response.text
    for name in LLAMACPP_GAUGES:
        assert values[f"llamacpp:{name}"][0] == "gauge", name
    assert values["llamacpp:n_decode_total"][1] > 0
    assert values["llamacpp:requests_processing"][1] == 0
    assert values["llamacpp:requests_deferred"][1] == 0
    assert values["llamacpp:n_tokens_max"][1] >= 4
    assert 0 < values["llamacpp:n_busy_slots_per_decode"][1] <= 1  # one slot
    assert "mlxcel_requests_total" in response.text  # the spec's series stay


def test_cached_prompt_tokens_are_counted_apart(keyed):
    prompt = "the quick brown fox jumps over the lazy dog"
    with keyed.client(headers=AUTH) as client:
        before = _metrics(client.get("/metrics").text)
        timings = [client.post("/completion", json={"prompt": prompt, "n_predict": 4, "temperature": 0,
                                                    "ignore_eos": True, "cache_prompt": True}).json()["timings"] for _ in range(2)]
        after = _metrics(client.get("/metrics").text)

    def grew(name: str) -> float:
        return after[f"llamacpp:{name}"][1] - before[f"llamacpp:{name}"][1]

    assert timings[1]["cache_n"] > 0  # the second request reused the first one's prompt
    assert grew("prompt_tokens_total") == sum(t["prompt_n"] for t in timings)
    assert grew("prompt_tokens_cached_total") == sum(t["cache_n"] for t in timings)
    assert grew("tokens_predicted_total") == sum(t["predicted_n"] for t in timings) == 8
    assert grew("prompt_seconds_total") > 0 and grew("tokens_predicted_seconds_total") > 0
    # the rates cover the time since the previous scrape; generation leaves out the first token
    assert after["llamacpp:prompt_tokens_seconds"][1] > 0
    assert after["llamacpp:predicted_tokens_seconds"][1] > 0


def test_process_start_time_header_on_the_wire(keyed):
    status, sent, _ = raw_request("127.0.0.1", keyed.port, "GET", "/metrics", AUTH)
    assert status == 200
    started = int(dict(sent)["Process-Start-Time-Unix"])
    with keyed.client(headers=AUTH) as client:
        assert abs(started - client.get("/v1/models").json()["data"][0]["created"]) <= 1


def test_metrics_without_the_flag_is_501(restricted):
    response = httpx.get(f"{restricted.base_url}/api/metrics")
    assert response.status_code == 501
    error = response.json()["error"]
    assert error["type"] == "not_supported_error" and error["code"] == 501
    assert error["message"] == "This server does not support metrics endpoint. Start it with `--metrics`"


# -- props and models ----------------------------------------------------------------


def test_props_carries_llama_servers_fields(keyed):
    with keyed.client(headers=AUTH) as client:
        body = client.get("/props").json()
    settings = body["default_generation_settings"]
    assert settings["n_ctx"] == 1024 and settings["params"]["temperature"] == settings["temperature"]
    assert settings["temperature"] == pytest.approx(0.8)
    assert body["total_slots"] == 1 and body["model_alias"] == "alpha"
    assert body["model_path"].endswith(".gguf") and body["model_ftype"]
    assert body["modalities"] == {"vision": False, "video": False, "audio": False}
    assert body["endpoint_metrics"] is True and body["endpoint_slots"] is True and body["is_sleeping"] is False
    assert "<|im_start|>" in body["chat_template"] and body["bos_token"] and body["eos_token"]
    caps = body["chat_template_caps"]
    assert caps["supports_string_content"] is True and caps["supports_system_role"] is True
    assert caps["supports_tools"] is False  # SmolLM2's template ignores tools
    assert body["build_info"].startswith("mlxcel")


def test_models_list_aliases_and_tags(keyed):
    with keyed.client(headers=AUTH) as client:
        for path in ("/v1/models", "/models"):
            body = client.get(path).json()
            entry = body["data"][0]
            assert entry["id"] == "alpha"  # llama-server keeps aliases sorted; the first is the id
            assert entry["aliases"] == ["alpha", "zeta"] and entry["tags"] == ["chat", "tiny"]
            meta = entry["meta"]
            assert meta["n_ctx"] == 1024 and meta["n_vocab"] > 0 and meta["n_embd"] > 0 and meta["ftype"]
            assert body["models"][0]["name"] == "alpha" and body["models"][0]["capabilities"] == ["completion"]
        reply = client.post("/v1/chat/completions", json={"model": "zeta", "max_tokens": 1,
                                                          "messages": [{"role": "user", "content": "hi"}]})
        assert reply.status_code == 200 and reply.json()["model"]


def test_models_without_aliases_lists_empty_ones(restricted):
    entry = httpx.get(f"{restricted.base_url}/api/v1/models").json()["data"][0]
    assert entry["id"] == "smollm2-135m-instruct" and entry["aliases"] == [] and entry["tags"] == []


# -- listening -----------------------------------------------------------------------


@pytest.mark.skipif(not HAS_V6, reason="this machine has no IPv6 loopback (::1)")
def test_host_list_serves_ipv4_and_ipv6(keyed):
    for host in ("127.0.0.1", "::1"):
        status, _, body = raw_request(host, keyed.port, "GET", "/health")
        assert status == 200 and b'"ok"' in body, host


def test_api_prefix_serves_every_route_under_it(restricted):
    base = restricted.base_url
    assert httpx.get(f"{base}/api/v1/health").status_code == 200
    assert httpx.get(f"{base}/api/props").json()["total_slots"] == 1
    reply = httpx.post(f"{base}/api/completion", json={"prompt": "Hi", "n_predict": 2}, timeout=120)
    assert reply.status_code == 200 and reply.json()["tokens_predicted"] == 2
    outside = httpx.get(f"{base}/health")
    assert outside.status_code == 404
    assert outside.json() == {"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}
