"""Reading a request body as a checked JSON object (mlxcel.http.input_bounds) and
validating it into a wire model, with every failure turned into a 4xx in the spec's
error shape. Large bodies are parsed and checked on a worker thread, so a big body
never stalls the event loop."""

from __future__ import annotations

import asyncio
import json
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from mlxcel.http.errors import APIError, describe_validation_errors, invalid_request
from mlxcel.http.input_bounds import BodyError, parse_and_check

Model = TypeVar("Model", bound=BaseModel)
OFFLOAD_BYTES = 64 * 1024  # bodies larger than this are parsed off the event loop


async def read_json_object(request: Request, max_bytes: int | None = None) -> dict:
    raw = await read_raw_body(request, max_bytes)
    return await _off_loop_if_large(raw, _checked, request, raw)


async def read_optional_object(request: Request, max_bytes: int = 64 * 1024) -> dict:
    """A small body that may be empty ({}) or a checked JSON object (the edge's checks:
    lone surrogates, nesting, sizes), for the routes whose fields are all optional."""
    raw = await read_raw_body(request, max_bytes)
    if not raw.strip():
        return {}
    return await _off_loop_if_large(raw, _checked, request, raw)


async def read_small_json(request: Request, max_bytes: int = 64 * 1024):
    """A small body that may be any JSON value (not only an object), size-capped."""
    raw = await read_raw_body(request, max_bytes)
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        raise invalid_request("the request body is not valid JSON") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


async def read_model(request: Request, model: type[Model]) -> tuple[dict, Model]:
    """The body as a checked JSON object and validated into `model`: one read, and
    for a large body one trip to a worker thread for both."""
    raw = await read_raw_body(request, None)

    def parse(request: Request, raw: bytes) -> tuple[dict, Model]:
        data = _checked(request, raw)
        return data, validate(model, data)

    return await _off_loop_if_large(raw, parse, request, raw)


async def _off_loop_if_large(raw: bytes, work, *args):
    if len(raw) > OFFLOAD_BYTES:
        return await asyncio.to_thread(work, *args)
    return work(*args)


def _checked(request: Request, raw: bytes) -> dict:
    config, host = request.app.state.config, request.app.state.host
    n_ctx = host.runtime.n_ctx if host is not None and host.runtime is not None else 0
    max_chars = config.limits.chars_cap(n_ctx)
    try:
        return parse_and_check(raw, config.limits, max_chars)
    except BodyError as exc:
        raise APIError(exc.status, exc.message, "invalid_request_error", exc.code) from None


async def read_raw_body(request: Request, max_bytes: int | None) -> bytes:
    config = request.app.state.config
    max_bytes = max_bytes or config.max_body_bytes
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(max_bytes: int) -> APIError:
    return APIError(413, f"the request body exceeds {max_bytes} bytes", "invalid_request_error")


def validate(model: type[Model], data: dict) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_request(describe_validation_errors(exc.errors())) from None
