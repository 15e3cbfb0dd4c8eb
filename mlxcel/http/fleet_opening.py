"""Opening a request on a server with many models: the body's `model` (and `profile`)
address a model, its profile's defaults fill what the body leaves out, and the
request leases the model (loading it if needed) until its response ends; the
LeaseMiddleware releases the lease after the last byte."""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import asynccontextmanager
from typing import TypeVar

from fastapi import Request
from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlxcel.fleet.addressing import address
from mlxcel.fleet.errors import ModelNotFound
from mlxcel.fleet.model_files import family_of
from mlxcel.fleet.profile_apply import apply_defaults
from mlxcel.fleet.residency import Fleet
from mlxcel.http.errors import invalid_request, is_anthropic_path
from mlxcel.http.json_body import read_json_object, validate
from mlxcel.turn.model_host import ModelHost

Model = TypeVar("Model", bound=BaseModel)
LEASE_KEY = "fleet_lease"
EARLY_KEY = "fleet_early_stream"
MODEL_KEY = "fleet_model_id"
SSE_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
               (b"x-accel-buffering", b"no")]


def _name_field(data: dict, key: str) -> str | None:
    value = data.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise invalid_request(f"`{key}` must be a string")
    return value


async def open_in_fleet(request: Request, model: type[Model], api: str | None) -> tuple[ModelHost | None, dict, Model]:
    """The addressed model's host (None only for a chat dry run of a model that is not
    resident: a dry run never loads one), the body with the profile's defaults, and
    the body validated."""
    fleet: Fleet = request.app.state.fleet
    data = await read_json_object(request)
    addressed = address(fleet.config, _name_field(data, "model"), _name_field(data, "profile"), family_of)
    data.pop("profile", None)
    if api is not None:
        data = apply_defaults(api, data, addressed.defaults)
    body = validate(model, data)
    resident = fleet.resident(addressed.entry.id)
    request.scope.setdefault("state", {})[MODEL_KEY] = addressed.entry.id
    if data.get("dry_run") is True and api == "chat":
        return (resident.host if resident is not None and resident.ready else None), data, body
    if data.get("stream") is True and (resident is None or not resident.ready):
        async with _keepalives(request.scope, fleet.base.sse_ping_interval):
            lease = await fleet.acquire(addressed.entry)
    else:
        lease = await fleet.acquire(addressed.entry)
    request.scope.setdefault("state", {})[LEASE_KEY] = lease
    return lease.resident.host, data, body


@asynccontextmanager
async def _keepalives(scope: Scope, interval: int):
    """While a streaming request waits for its model to load: after `interval`
    seconds of silence the stream's headers go out, then a comment every `interval`
    (the LeaseMiddleware then fits the route's own response into that stream)."""
    early = scope.get("state", {}).get(EARLY_KEY)
    if early is None or interval <= 0:
        yield
        return

    async def ping() -> None:
        while True:
            await asyncio.sleep(interval)
            await early.ping()

    task = asyncio.create_task(ping())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def lease_of(scope: Scope):
    return scope.get("state", {}).get(LEASE_KEY)


class EarlyStream:
    """A stream whose headers went out before the route answered: the route's own
    start is dropped, and an error answer becomes one SSE error event."""

    def __init__(self, send: Send, anthropic: bool) -> None:
        self._send, self._anthropic = send, anthropic
        self.started = False  # the headers went out early
        self.route_started = False
        self._status = 200
        self._error_body = b""

    async def ping(self) -> None:
        if not self.route_started:
            if not self.started:
                self.started = True
                await self._send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
            await self._send({"type": "http.response.body", "body": b":\n\n", "more_body": True})

    async def send(self, message: Message) -> None:
        if not self.started:
            if message["type"] == "http.response.start":
                self.route_started = True
            await self._send(message)
            return
        if message["type"] == "http.response.start":
            self.route_started = True
            self._status = message["status"]
            return
        if message["type"] != "http.response.body" or self._status < 300:
            await self._send(message)
            return
        self._error_body += message.get("body", b"")
        if not message.get("more_body", False):
            text = self._error_body.decode("utf-8", "replace")
            frame = f"event: error\ndata: {text}\n\n" if self._anthropic else f"data: {text}\n\n"
            await self._send({"type": "http.response.body", "body": frame.encode(), "more_body": False})


class LeaseMiddleware:
    """Releases the request's model lease as its response's last byte goes out (a
    stream included), or when the request fails: a client that has read the end of
    one answer and asks for another model must find this one idle, so the release
    comes before that byte is sent, not after the route returns."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_last_released(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                _release(scope)
            await send(message)

        state = scope.setdefault("state", {})  # shared with the copies inner layers make of the scope
        early = state[EARLY_KEY] = EarlyStream(send_last_released, is_anthropic_path(scope.get("path", "")))
        try:
            await self.app(scope, receive, early.send)
        finally:
            _release(scope)


def _release(scope: Scope) -> None:
    lease = lease_of(scope)
    if lease is not None:
        lease.release()  # once: a second call does nothing


def check_service_model(request: Request, name, service_id: str, *also: str | None) -> None:
    """With many models, an embeddings or rerank body's `model` must name that service's
    model (or be empty): anything else is 404 model_not_found, as on generation routes."""
    if request.app.state.fleet is None or name is None or name == "":
        return
    if not isinstance(name, str):
        raise invalid_request("`model` must be a string")
    if name not in {service_id, *(a for a in also if a)}:
        raise ModelNotFound(name, [service_id])
