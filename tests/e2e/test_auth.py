"""--api-key: Bearer or raw token, llama-server's 401 body, /health, /v1/health and / open. Also --no-slots."""

from __future__ import annotations

import pytest

from tests.server_process import ServerProcess

KEY = "sk-test-secret"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    key_file = tmp_path_factory.mktemp("keys") / "keys.txt"
    key_file.write_text("# one key per line\nsk-from-file\n")
    proc = ServerProcess("-c", "512", "-np", "1", "--api-key", KEY, "--api-key-file", str(key_file), "--no-slots")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def test_missing_key(secured):
    with secured.client() as client:
        response = client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
    assert response.status_code == 401
    assert response.json() == {"error": {"message": "Missing API key: send it as `Authorization: Bearer KEY`",
                                         "type": "missing_api_key", "code": "missing_api_key"}}


@pytest.mark.parametrize("header", ["Bearer wrong", "wrong", f"Bearer {KEY}x", "Basic abc"])
def test_wrong_key(secured, header):
    with secured.client() as client:
        response = client.get("/v1/models", headers={"Authorization": header})
    assert response.status_code == 401
    assert response.json() == {"error": {"message": "Invalid API Key", "type": "invalid_api_key",
                                         "code": "invalid_api_key"}}


@pytest.mark.parametrize("header", [f"Bearer {KEY}", KEY, f"bearer {KEY}", "Bearer sk-from-file"])
def test_accepted_keys(secured, header):
    with secured.client() as client:
        assert client.get("/v1/models", headers={"Authorization": header}).status_code == 200


def test_health_and_root_need_no_key(secured):
    with secured.client() as client:
        assert client.get("/health").status_code == 200
        assert client.get("/").status_code == 200
        assert client.get("/v1/health").status_code == 200
        assert client.get("/props").status_code == 401
        assert client.head("/health").status_code == 200 and client.head("/props").status_code == 401


def test_openai_sdk_with_key(secured):
    from openai import AuthenticationError, OpenAI

    good = OpenAI(base_url=f"{secured.base_url}/v1", api_key=KEY, max_retries=0)
    assert good.completions.create(model="m", prompt="Hi", max_tokens=2).usage.completion_tokens == 2
    with pytest.raises(AuthenticationError):
        OpenAI(base_url=f"{secured.base_url}/v1", api_key="nope", max_retries=0).models.list()


def test_slots_endpoint_can_be_disabled(secured):
    with secured.client() as client:
        response = client.get("/slots", headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 501
    assert response.json()["error"]["type"] == "not_supported_error"


def test_a_websocket_handshake_needs_the_key_too(secured):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    url = f"ws://127.0.0.1:{secured.port}/v1/realtime"
    with pytest.raises(InvalidStatus) as keyless:
        connect(url, open_timeout=30)
    assert keyless.value.response.status_code == 401
    assert b"missing_api_key" in keyless.value.response.body
    with pytest.raises(InvalidStatus) as keyed:  # past the key: the route's own refusal
        connect(url, open_timeout=30, additional_headers={"Authorization": f"Bearer {KEY}"})
    assert keyed.value.response.status_code == 501
