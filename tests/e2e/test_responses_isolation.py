"""A Responses request cannot hurt the server or other clients: malformed nested
shapes are 400s, a long history is prepared off the event loop (/health keeps
answering), text a response cannot echo is refused before generation. On the shared
server."""

from __future__ import annotations

import statistics

import httpx
import pytest

from mlxcel.api.responses.capsule import Capsule, encode_capsule
from tests.fixtures.hostile_responses import HOSTILE_BODIES
from tests.health_probe import health_latencies_while

ROUTES = {
    "create": ("/v1/responses", {"max_output_tokens": 2}),
    "background": ("/v1/responses", {"max_output_tokens": 2, "background": True}),
    "input_tokens": ("/v1/responses/input_tokens", {}),
    "compact": ("/v1/responses/compact", {"max_output_tokens": 2}),
}


def _assert_error(response, status=400) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"] and "code" in error
    return error


@pytest.mark.parametrize("route", list(ROUTES))
def test_hostile_nested_shapes_are_400s(http, route):
    path, extra = ROUTES[route]
    for name, body in HOSTILE_BODIES.items():
        response = http.post(path, json={**body, **extra})
        assert response.status_code == 400, f"{name}: {response.status_code} {response.text[:300]}"
        _assert_error(response)
    assert http.get("/health").status_code == 200


@pytest.mark.parametrize("path, raw", [
    ("/v1/responses", b'{"input": "hi", "instructions": "\\ud800", "max_output_tokens": 2}'),
    ("/v1/responses", b'{"input": "hi", "instructions": "\\ud800", "max_output_tokens": 2, "background": true}'),
    ("/v1/responses", b'{"input": "hi", "instructions": "\\ud800", "max_output_tokens": 2, "stream": true}'),
    ("/v1/responses", b'{"input": "hi", "metadata": {"a": "\\udfff"}, "max_output_tokens": 2}'),
    ("/v1/responses/compact", (b'{"input": [{"role": "user", "content": "a\\ud800"}, {"role": "assistant", '
                               b'"content": "b"}, {"role": "user", "content": "c"}], "max_output_tokens": 2}')),
])
def test_text_a_response_cannot_echo_is_refused_before_generation(http, path, raw):
    response = http.post(path, content=raw, headers={"content-type": "application/json"})
    _assert_error(response)
    assert http.get("/health").status_code == 200


def _long_history(n: int) -> list[dict]:
    text = "The quick brown fox jumps over the lazy dog, again and again. " * 3
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {text}"} for i in range(n)]


def test_health_answers_while_long_histories_are_prepared(server):
    history = _long_history(4001)
    capsule = encode_capsule(Capsule("earlier", []))
    compactions = [{"type": "compaction", "encrypted_content": capsule}] * 4000 + [{"role": "user", "content": "hi"}]

    def post(path: str, body: dict):
        return lambda: httpx.post(f"{server.base_url}{path}", json=body, timeout=300)

    latencies, results = health_latencies_while(server, [
        post("/v1/responses/input_tokens", {"input": history}),
        post("/v1/responses/input_tokens", {"input": history}),
        post("/v1/responses", {"input": history, "max_output_tokens": 2}),
        post("/v1/responses/compact", {"input": history}),
        post("/v1/responses/input_tokens", {"input": compactions}),
    ])
    statuses = sorted(r.status_code for r in results)
    assert statuses == [200, 200, 200, 400, 400], [r.text[:200] for r in results]  # two histories exceed a slot
    assert len(latencies) >= 5, latencies
    assert statistics.median(latencies) < 0.1 and max(latencies) < 1.0, latencies
