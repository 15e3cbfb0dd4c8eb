"""Typed errors of everything below the HTTP edge: why a request cannot be served
as asked. The edge (mlxcel.http.errors) maps each kind to a status and an error body,
once, for every API."""

from __future__ import annotations

from mlxcel.engine.request import Failure


class TurnError(Exception):
    """Base: a message for the client, an optional machine-readable code, and extra
    fields the error body carries."""

    def __init__(self, message: str, code: str | None = None, **extra) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.extra = extra


class InvalidRequest(TurnError):
    """The request cannot be served as sent (400)."""


class ContextOverflow(InvalidRequest):
    """The prompt does not fit the slot's context (400, with both sizes)."""

    def __init__(self, n_prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(
            f"request ({n_prompt_tokens} tokens) exceeds the available context size ({n_ctx} tokens), "
            "try increasing it",
            code="context_length_exceeded",
            n_prompt_tokens=n_prompt_tokens,
            n_ctx=n_ctx,
        )


class PromptTooLong(InvalidRequest):
    """003's context budget (with many models): the prompt plus max_tokens must fit the
    slot's context. The message starts with "prompt is too long", which agent clients
    look for before compacting the conversation and retrying."""

    def __init__(self, n_prompt_tokens: int, max_tokens: int | None, n_ctx: int) -> None:
        asked = f"{n_prompt_tokens} prompt tokens"
        if max_tokens:
            asked += f" + {max_tokens} max_tokens = {n_prompt_tokens + max_tokens} tokens"
        super().__init__(f"prompt is too long: the request needs {asked}, which exceeds the context window "
                         f"of {n_ctx} tokens", code="context_length_exceeded", n_prompt_tokens=n_prompt_tokens,
                         max_tokens=max_tokens, n_ctx=n_ctx)


class NotSupported(TurnError):
    """The loaded model cannot do what the route asks, e.g. /infill without FIM tokens (501)."""


class NotFound(TurnError):
    """A named resource (a stored response, a conversation) does not exist for this client (404)."""


class RateLimited(TurnError):
    """A per-server allowance is used up for now (429)."""


class ServerBusy(TurnError):
    """No capacity now: the queue is full or the model is still loading (503, retry)."""


class TimedOut(TurnError):
    """The request ran past its time limit, e.g. --audio-request-timeout-secs (504)."""


class EngineUnavailable(TurnError):
    """The engine failed: nothing is served until the server restarts (503)."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the server cannot generate: {reason}", code="engine_failed")


class GenerationFailed(TurnError):
    """A generation broke on our side (500): a bug, described in the log."""


class RequestShed(TurnError):
    """The memory governor ended this request to keep the process alive (503,
    server_overloaded_shed, finish_reason shed)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="server_overloaded_shed", finish_reason="shed")


def generation_error(finish) -> TurnError:
    """The error a failed generation (an engine FinishEvent with reason ERROR) is
    answered with: EngineUnavailable when the engine itself failed, ServerBusy when the
    server stopped while it ran (a retry may reach another server), InvalidRequest when
    the request's own constraints left nothing to sample, else GenerationFailed (its
    message names the engine request the log describes)."""
    failure = finish.failure
    if failure is Failure.ENGINE:
        return EngineUnavailable(finish.error or "the engine failed")
    if failure is Failure.STOPPING:
        return ServerBusy(finish.error or "the server is shutting down", code="server_shutting_down")
    if failure is Failure.SHED:
        return RequestShed(finish.error or "the request was shed to free memory")
    if failure is Failure.UNSATISFIABLE:
        return InvalidRequest(finish.error or "the request's constraints cannot be met", "unsatisfiable_request")
    return GenerationFailed(f"generation failed: {finish.error}")
