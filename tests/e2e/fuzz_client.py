"""Sending one fuzzed body to a real server and judging what came back: no 5xx (but
the one the spec mandates), every error in the spec's shape, no hang, and streams
that end cleanly without an in-stream server error."""

from __future__ import annotations

import json
import time

import httpx

from mlxcel.http.errors import is_anthropic_path

REQUEST_TIMEOUT_S = 60.0  # a request still running after this long is a hang
ALLOWED_STATUSES = {200, 400, 413, 415}  # 415: a media part of a format no decoder takes


class Hang(AssertionError):
    pass


def send(client: httpx.Client, path: str, raw: bytes, timeout: float = REQUEST_TIMEOUT_S):
    """(status, headers, whole body): the body read to its end within `timeout`
    seconds of the request, however slowly a stream trickles."""
    deadline = time.monotonic() + timeout
    try:
        with client.stream("POST", path, content=raw, headers={"content-type": "application/json"},
                           timeout=timeout) as response:
            chunks = []
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise Hang(f"POST {path}: still streaming after {timeout:.0f} s")
            return response.status_code, response.headers, b"".join(chunks)
    except httpx.TimeoutException as exc:
        raise Hang(f"POST {path}: no answer within {timeout:.0f} s ({type(exc).__name__})") from None


def error_shape_problem(path: str, body) -> str | None:
    """What is wrong with an error body's shape, or None (the spec's OpenAI shape;
    Anthropic's on /v1/messages*)."""
    if is_anthropic_path(path):
        ok = (isinstance(body, dict) and body.get("type") == "error" and isinstance(body.get("error"), dict)
              and isinstance(body["error"].get("type"), str) and isinstance(body["error"].get("message"), str))
        return None if ok else "not Anthropic's error shape {type: error, error: {type, message}}"
    error = body.get("error") if isinstance(body, dict) else None
    ok = (isinstance(error, dict) and isinstance(error.get("message"), str) and isinstance(error.get("type"), str)
          and "code" in error and (error["code"] is None or isinstance(error["code"], (str, int))))
    return None if ok else "not the spec's error shape {error: {message, type, code}}"


def _is_mandated_500(path: str, status: int, body) -> bool:
    """The spec's one 500: /detokenize with a token id outside the vocabulary."""
    error = body.get("error") if isinstance(body, dict) else None
    return (path == "/detokenize" and status == 500 and isinstance(error, dict)
            and error.get("type") == "server_error" and "vocabulary" in str(error.get("message")))


def _stream_problems(path: str, text: str) -> list[str]:
    problems = []
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            continue
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            problems.append(f"a stream event is not JSON: {data[:200]}")
            continue
        if not isinstance(event, dict):
            continue
        kind = event.get("type")
        if "error" in event and event["error"] and (kind in (None, "error") or is_anthropic_path(path)):
            error = event["error"]
            error_type = error.get("type") if isinstance(error, dict) else None
            problems.append(f"the stream carried an error event ({error_type}): {data[:300]}")
        elif kind == "response.failed":
            problems.append(f"the response failed mid-stream: {data[:300]}")
        elif any(isinstance(c, dict) and c.get("finish_reason") == "error" for c in event.get("choices") or ()):
            problems.append(f"the generation ended in an error: {data[:300]}")
    return problems


def _whole_problems(body: dict) -> list[str]:
    choices = body.get("choices")
    if isinstance(choices, list) and any(isinstance(c, dict) and c.get("finish_reason") == "error" for c in choices):
        return ["the generation ended in an error"]
    if body.get("object") == "response" and body.get("status") == "failed":
        return ["the response failed"]
    return []


def background_problems(client: httpx.Client, body: dict, timeout: float = REQUEST_TIMEOUT_S) -> list[str]:
    """A background response polled until it ends: failing with server_error is a
    bug (invalid_prompt and server_overloaded are the client's or the load's)."""
    deadline = time.monotonic() + timeout
    while body.get("status") in ("queued", "in_progress"):
        if time.monotonic() > deadline:
            raise Hang(f"background response {body.get('id')} still {body.get('status')} after {timeout:.0f} s")
        time.sleep(0.05)
        response = client.get(f"/v1/responses/{body['id']}")
        if response.status_code != 200:
            return [f"GET /v1/responses/{body['id']} -> {response.status_code}: {response.text[:300]}"]
        body = response.json()
    error = body.get("error") or {}
    if body.get("status") == "failed" and error.get("code") == "server_error":
        return [f"background response {body['id']} failed: {error.get('message')}"]
    return []


def problems(path: str, status: int, headers, content: bytes) -> list[str]:
    """Everything wrong with one answer (empty: it is a fine answer)."""
    found = []
    text = content.decode("utf-8", errors="replace")
    is_stream = headers.get("content-type", "").startswith("text/event-stream")
    body = None
    if not is_stream:
        try:
            body = json.loads(content)
        except json.JSONDecodeError:
            found.append(f"the body is not JSON: {text[:200]}")
    if _is_mandated_500(path, status, body):
        return found
    if status not in ALLOWED_STATUSES:
        found.append(f"status {status}")
    if status >= 400 and body is not None:
        shape = error_shape_problem(path, body)
        if shape:
            found.append(shape)
    if status == 200 and is_stream:
        found += _stream_problems(path, text)
    if status == 200 and isinstance(body, dict):
        found += _whole_problems(body)
    return [f"POST {path} -> {status}: {p}; answer: {text[:300]}" for p in found]


def checked_problems(client: httpx.Client, path: str, raw: bytes) -> list[str]:
    """Send `raw` and judge the answer; a background response is followed to its end."""
    status, headers, content = send(client, path, raw)
    found = problems(path, status, headers, content)
    if status == 200 and not found and not headers.get("content-type", "").startswith("text/event-stream"):
        body = json.loads(content)
        if isinstance(body, dict) and body.get("object") == "response" and body.get("background"):
            found += background_problems(client, body)
    return found
