"""API errors, and the handlers that render every failure of every route: in the
spec's (OpenAI) shape, or in Anthropic's on the Anthropic routes."""

from __future__ import annotations

import logging
import uuid

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.template import TemplateError
from mlxcel.fleet.errors import (
    ModelBusy,
    ModelLoadDeferred,
    ModelNotFound,
    ModelNotLoaded,
    ModelRequired,
    RequestShed,
    ServerOverloaded,
    UnknownProfile,
)
from mlxcel.media.types import MediaError
from mlxcel.speech.errors import AudioModelMissing, AudioTimedOut
from mlxcel.state.store import StateUnavailable
from mlxcel.structured.errors import GrammarError, StructuredOutputError
from mlxcel.turn.errors import (
    ContextOverflow,
    EngineUnavailable,
    GenerationFailed,
    InvalidRequest,
    NotFound,
    NotSupported,
    RateLimited,
    ServerBusy,
    TimedOut,
    TurnError,
)

log = logging.getLogger("mlxcel.server")

ANTHROPIC_PREFIXES = ("/v1/messages", "/messages")
RESPONSES_PREFIXES = ("/v1/responses", "/responses")
# Anthropic's error type for an HTTP status; a busy server is Anthropic's 529
ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                   403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                   429: "rate_limit_error", 500: "api_error", 504: "timeout_error", 529: "overloaded_error"}
OVERLOADED_STATUS = 529
# the 503s that say "no capacity now, retry" (not "the engine failed"): Anthropic's 529 overloaded_error
CAPACITY_TYPES = frozenset({"server_busy", "model_load_deferred", "server_overloaded", "server_overloaded_shed"})
CLIENT_CLOSED_REQUEST = 499


def is_anthropic_path(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in ANTHROPIC_PREFIXES)


def is_responses_path(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in RESPONSES_PREFIXES)


def anthropic_error_body(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


class APIError(Exception):
    def __init__(self, status: int, message: str, type: str, code: str | int | None = None, **extra) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.retry_after = extra.pop("retry_after", None)  # seconds: a Retry-After header, not a body field
        self.extra = extra

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "code": self.code, **self.extra}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers())

    def headers(self) -> dict[str, str] | None:
        return {"Retry-After": str(int(self.retry_after))} if self.retry_after is not None else None

    def anthropic_status(self) -> int:
        return OVERLOADED_STATUS if self.type in CAPACITY_TYPES else self.status

    def anthropic_body(self) -> dict:
        """Anthropic's shape; the error's own fields (a model_not_found's available_models,
        a context overflow's n_ctx) ride along in its error object."""
        status = self.anthropic_status()
        kind = ANTHROPIC_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
        body = anthropic_error_body(kind, self.message)
        body["error"].update({k: v for k, v in self.extra.items() if k not in body["error"]})
        return body

    def anthropic_response(self) -> JSONResponse:
        return JSONResponse(self.anthropic_body(), status_code=self.anthropic_status(), headers=self.headers())


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


# each typed error of the layers below, as (status, OpenAI error type)
TURN_ERRORS: dict[type[TurnError], tuple[int, str]] = {
    AudioModelMissing: (501, "not_implemented"),
    AudioTimedOut: (504, "timeout_error"),
    InvalidRequest: (400, "invalid_request_error"),
    NotFound: (404, "invalid_request_error"),
    NotSupported: (501, "not_supported_error"),
    RateLimited: (429, "rate_limit_error"),
    ServerBusy: (503, "server_busy"),
    TimedOut: (504, "timeout_error"),
    EngineUnavailable: (503, "unavailable_error"),
    GenerationFailed: (500, "server_error"),
    ModelNotFound: (404, "model_not_found"),
    UnknownProfile: (400, "unknown_profile"),
    ModelRequired: (400, "invalid_request_error"),
    ModelLoadDeferred: (503, "model_load_deferred"),
    ModelNotLoaded: (400, "invalid_request_error"),
    ModelBusy: (409, "conflict_error"),
    ServerOverloaded: (503, "server_overloaded"),
    RequestShed: (503, "server_overloaded_shed"),
}


def as_api_error(exc: Exception) -> APIError:
    """Every failure a route can raise, as the APIError it is shown as: the one place
    where typed errors become HTTP statuses."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ContextOverflow):  # llama-server's body: its own type, the status as code
        return APIError(400, exc.message, "exceed_context_size_error", 400, **exc.extra)
    if isinstance(exc, TurnError):
        status, kind = next((v for k, v in TURN_ERRORS.items() if isinstance(exc, k)), (500, "server_error"))
        return APIError(status, exc.message, kind, exc.code, **exc.extra)
    if isinstance(exc, GrammarError):
        return invalid_request(str(exc), code="invalid_grammar")
    if isinstance(exc, StructuredOutputError):
        return invalid_request(str(exc), code="invalid_response_format")
    if isinstance(exc, TemplateError):
        return invalid_request(str(exc), code="template_error")
    if isinstance(exc, ChatInputError):
        return invalid_request(exc.message, code=exc.code)
    if isinstance(exc, StateUnavailable):  # Redis down or slow, SQLite locked: retry later
        return APIError(503, str(exc), "unavailable_error", exc.code, retry_after=1)
    if isinstance(exc, MediaError):
        kind = "server_busy" if exc.status == 503 else "invalid_request_error"
        return APIError(exc.status, exc.message, kind, exc.code, **({"retry_after": 1} if exc.status == 503 else {}))
    if isinstance(exc, RequestValidationError):
        return invalid_request(describe_validation_errors(exc.errors()))
    if isinstance(exc, StarletteHTTPException):
        kinds = {404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error"}
        kind = kinds.get(exc.status_code, "invalid_request_error" if exc.status_code < 500 else "server_error")
        return APIError(exc.status_code, str(exc.detail), kind)
    return server_error(f"internal server error: {type(exc).__name__}")


def render_error(request: Request, exc: Exception) -> JSONResponse:
    path = request.url.path
    if is_responses_path(path) and isinstance(exc, ContextOverflow):  # OpenAI's Responses shape there
        return invalid_request(exc.message, exc.code, **exc.extra).response()
    error = as_api_error(exc)
    if error.code == "queue_full":
        monitor = getattr(request.app.state, "monitor", None)
        if monitor is not None:
            monitor.queue.reject(error.message)
        if getattr(request.app.state, "fleet", None) is not None:
            error.type = "server_overloaded"  # 003's name for a queue-cap rejection; -m keeps 001's
    return error.anthropic_response() if is_anthropic_path(path) else error.response()


def install_error_handlers(app: FastAPI) -> None:
    async def _known(request: Request, exc: Exception) -> JSONResponse:
        response = render_error(request, exc)
        if isinstance(exc, StarletteHTTPException) and exc.headers:  # a 405's Allow
            response.headers.update(exc.headers)
        return response

    for kind in (APIError, TurnError, StructuredOutputError, TemplateError, ChatInputError, MediaError,
                 StateUnavailable, RequestValidationError, StarletteHTTPException):
        app.add_exception_handler(kind, _known)

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect) -> Response:
        """The client left while its body was read: nobody is there to answer, and
        nothing went wrong on our side (499, as nginx logs it)."""
        log.debug("client left during %s %s", request.method, request.url.path)
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        request_id = f"req_{uuid.uuid4().hex[:16]}"
        log.error("unhandled error on %s %s [%s]", request.method, request.url.path, request_id, exc_info=exc)
        error = server_error(f"internal server error ({type(exc).__name__}); request id {request_id}")
        response = error.anthropic_response() if is_anthropic_path(request.url.path) else error.response()
        response.headers["x-request-id"] = request_id
        return response
