"""The gateway's own failures: a body Python's JSON parser cannot read (nested past its
recursion limit) goes on to a replica, which refuses it; any error of the gateway
itself is a 500 in the API's error format (Anthropic's on its routes) carrying a
request id, never Starlette's plain-text "Internal Server Error"."""

from __future__ import annotations

import asyncio
import json

from starlette.requests import Request

from mlxcel.cluster.gateway import Gateway
from mlxcel.http.envelope import HttpEnvelope

DEEP = b'{"id_slot": 0, "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def _gateway():
    gateway = Gateway.func_or_class.__new__(Gateway.func_or_class)  # no Ray: the methods under test need none
    gateway.api_prefix, gateway.max_body_bytes, gateway.slots_per_replica = "", 1 << 20, 2
    return gateway


def _request(path: str, body: bytes) -> Request:
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    return Request({"type": "http", "method": "POST", "path": path, "raw_path": path.encode(), "query_string": b"",
                    "headers": [(b"content-type", b"application/json")], "client": ("127.0.0.1", 1)}, receive)


def test_a_body_nested_too_deep_to_parse_goes_on_unchanged():
    envelope = HttpEnvelope("POST", "/v1/chat/completions", body=DEEP)
    assert _gateway()._pin_to_slot(envelope) == (envelope, None)


def test_an_error_of_the_gateway_is_a_500_in_the_api_s_format():
    gateway = _gateway()

    async def broken(request, envelope):
        raise RuntimeError("a bug")

    gateway._dispatch = broken
    for path, shape in (("/v1/chat/completions", "server_error"), ("/v1/messages", "api_error")):
        answer = asyncio.run(gateway.forward(_request(path, b"{}")))
        body = json.loads(answer.body)
        assert answer.status_code == 500 and answer.headers["x-request-id"].startswith("req_")
        assert (body["error"]["type"] == shape) and "RuntimeError" in body["error"]["message"]


def test_metrics_with_no_replica_answering_is_a_503_in_the_error_format():
    gateway = _gateway()

    async def none(envelope):
        return {}

    gateway._answers = none
    answer = asyncio.run(gateway._metrics(HttpEnvelope("GET", "/metrics")))
    assert answer.status_code == 503
    assert json.loads(answer.body)["error"] == {"message": "no replica answered", "type": "unavailable_error",
                                                "code": None}
