"""Reading a request body as a JSON object and validating it into a wire model,
with every failure turned into a 4xx in the spec's error shape."""

from __future__ import annotations

import json
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from mlxcel.server.errors import APIError, describe_validation_errors, invalid_request

Model = TypeVar("Model", bound=BaseModel)


async def read_json_object(request: Request, max_bytes: int) -> dict:
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
    raw = b"".join(chunks)
    if not raw.strip():
        raise invalid_request("the request body is empty; a JSON object is required")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise invalid_request(f"malformed JSON in the request body: {exc}") from None
    except RecursionError:
        raise invalid_request("malformed JSON in the request body: nested too deeply") from None
    if not isinstance(data, dict):
        raise invalid_request("the request body must be a JSON object")
    return data


def _too_large(max_bytes: int) -> APIError:
    return APIError(413, f"the request body exceeds {max_bytes} bytes", "invalid_request_error")


def validate(model: type[Model], data: dict) -> Model:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_request(describe_validation_errors(exc.errors())) from None
