"""Google Cloud Vertex AI's custom-container contract, as llama-server serves it: with
AIP_MODE=PREDICTION the server listens on AIP_HTTP_PORT (8080 unless set), answers
health on AIP_HEALTH_ROUTE too, and takes POST AIP_PREDICT_ROUTE (/predict unless set):
`{"instances": [{"@requestFormat": FORMAT, ...body}, ...]}`, each instance sent to the
route FORMAT names (a path such as "/v1/chat/completions", or its camelCase name,
"chatCompletions") with its other fields as the body, never streamed. The answer is
`{"predictions": [...]}`, each instance's JSON answer (or error object) in order; the
instances run together."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable

from mlxcel.config import VertexSettings
from mlxcel.http.envelope import HttpEnvelope, ResponseStart, play

MAX_INSTANCES = 128
# llama-server's routes in the order it registers them: a camelCase name is the first
# path it comes from ("/completions" before "/v1/completions", "/models" before "/v1/models")
LLAMA_SERVER_PATHS = (
    "/health", "/v1/health", "/metrics", "/props", "/models", "/v1/models", "/completion", "/completions",
    "/v1/completions", "/chat/completions", "/v1/chat/completions", "/v1/chat/completions/control",
    "/v1/responses", "/responses", "/v1/audio/transcriptions", "/audio/transcriptions", "/v1/messages",
    "/infill", "/embedding", "/embeddings", "/v1/embeddings", "/rerank", "/reranking", "/v1/rerank",
    "/v1/reranking", "/tokenize", "/detokenize", "/apply-template", "/chat/completions/input_tokens",
    "/v1/chat/completions/input_tokens", "/responses/input_tokens", "/v1/responses/input_tokens",
    "/v1/messages/count_tokens", "/lora-adapters", "/slots",
)


def camel_name(path: str) -> str:
    """llama-server's alias of a path: no /v1, words joined in camelCase ("/v1/chat/completions"
    -> "chatCompletions", "/apply-template" -> "applyTemplate")."""
    text = path.removeprefix("/v1") if path.startswith("/v1") and len(path) > 3 else path
    text = text.removeprefix("/")
    out, capital = [], False
    for char in text:
        if char in "/-_":
            capital = True
            continue
        out.append(char.upper() if capital else char)
        capital = False
    return "".join(out)


ALIASES: dict[str, str] = {}
for _path in LLAMA_SERVER_PATHS:
    ALIASES.setdefault(camel_name(_path), _path)


def vertex_settings(environ=os.environ) -> VertexSettings | None:
    """The contract's settings when AIP_MODE is PREDICTION, else None."""
    if environ.get("AIP_MODE", "") != "PREDICTION":
        return None

    def route(name: str, default: str | None) -> str | None:
        value = environ.get(name) or default
        return None if value is None else (value if value.startswith("/") else "/" + value)

    port_text = environ.get("AIP_HTTP_PORT") or "8080"
    if not (port_text.isdigit() and 0 < int(port_text) < 65536):
        raise ValueError(f"AIP_HTTP_PORT: {port_text!r} is not a port")
    return VertexSettings(route("AIP_HEALTH_ROUTE", None), route("AIP_PREDICT_ROUTE", "/predict"), int(port_text))


def _error(message: str, kind: str = "invalid_request_error", code: int = 400) -> dict:
    return {"error": {"code": code, "message": message, "type": kind}}


async def predict(app: Callable, request: HttpEnvelope, api_prefix: str, predict_route: str) -> tuple[int, dict]:
    """(status, answer) of one predict request; `app` serves each instance's route."""
    body = request.body
    try:  # a large body is parsed off the event loop
        data = await asyncio.to_thread(json.loads, body) if len(body) > 64 * 1024 else json.loads(body)
    except (ValueError, RecursionError) as exc:
        return 400, _error(f"the request body is not valid JSON: {exc}")
    if not isinstance(data, dict):
        return 400, _error("request body must be a JSON object")
    instances = data.get("instances")
    if not isinstance(instances, list):
        return 400, _error("request body must include an array field named instances")
    if len(instances) > MAX_INSTANCES:
        return 400, _error(f"instances array exceeds maximum size of {MAX_INSTANCES}")
    calls = [_one(app, instance, request, api_prefix, predict_route) for instance in instances]
    return 200, {"predictions": list(await asyncio.gather(*calls))}


async def _one(app: Callable, instance, request: HttpEnvelope, api_prefix: str, predict_route: str):
    if not isinstance(instance, dict):
        return _error("each instance must be a JSON object")
    request_format = instance.get("@requestFormat")
    if not isinstance(request_format, str):
        return _error("each instance must include a string @requestFormat")
    path = ALIASES.get(request_format, request_format)
    if not path.startswith("/") or path == predict_route:  # not itself: instances of instances, without end
        return _error(f"no handler registered for @requestFormat: {request_format}")
    payload = {k: v for k, v in instance.items() if k != "@requestFormat"}
    if "stream" in payload:
        payload["stream"] = False  # the predict route answers whole
    envelope = request.with_json("POST", api_prefix + path, payload)
    status, chunks = 500, []
    async for part in play(app, envelope):
        if isinstance(part, ResponseStart):
            status = part.status
        else:
            chunks.append(part)
    text = b"".join(chunks)
    if status == 404 and text and b"File Not Found" in text:
        return _error(f"no handler registered for @requestFormat: {request_format}")
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text.decode("utf-8", errors="replace")
