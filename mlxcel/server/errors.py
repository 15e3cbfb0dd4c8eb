"""API errors in the spec's (OpenAI) shape, and the handlers that render every
failure of every route that way."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.template import TemplateError
from mlxcel.structured.errors import StructuredOutputError

log = logging.getLogger("mlxcel.server")


class APIError(Exception):
    def __init__(self, status: int, message: str, type: str, code: str | int | None = None, **extra) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.extra = extra

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "code": self.code, **self.extra}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


def invalid_request(message: str, code: str | None = None, **extra) -> APIError:
    return APIError(400, message, "invalid_request_error", code, **extra)


def server_busy(message: str = "All slots are busy. Please try again later.") -> APIError:
    return APIError(503, message, "server_busy")


def not_supported(message: str) -> APIError:
    return APIError(501, message, "not_supported_error")


def server_error(message: str) -> APIError:
    return APIError(500, message, "server_error")


def describe_validation_errors(errors: list[dict]) -> str:
    """'invalid request: field.path: what is wrong; ...' for pydantic's error list."""
    parts = []
    for error in errors[:3]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid value')}")
    return "invalid request: " + ("; ".join(parts) or "malformed body")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(StructuredOutputError)
    async def _structured_output_error(_request: Request, exc: StructuredOutputError) -> JSONResponse:
        return invalid_request(str(exc), code="invalid_response_format").response()

    @app.exception_handler(TemplateError)
    async def _template_error(_request: Request, exc: TemplateError) -> JSONResponse:
        return invalid_request(str(exc), code="template_error").response()

    @app.exception_handler(ChatInputError)
    async def _chat_input_error(_request: Request, exc: ChatInputError) -> JSONResponse:
        return invalid_request(exc.message, code=exc.code).response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return invalid_request(describe_validation_errors(exc.errors())).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kinds = {404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error"}
        kind = kinds.get(exc.status_code, "invalid_request_error" if exc.status_code < 500 else "server_error")
        return APIError(exc.status_code, str(exc.detail), kind).response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return server_error(f"internal server error: {type(exc).__name__}").response()
