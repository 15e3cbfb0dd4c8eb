"""What a route reads off the HTTP request for the layers below (priority, the API
key's digest, a test's injected fault), and cancelling work when the client leaves."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from fastapi import Request
from starlette.requests import ClientDisconnect

from mlxcel.engine.faults import FAULT_HEADER, parse_fault
from mlxcel.engine.request import Priority
from mlxcel.http.auth import request_key_id
from mlxcel.turn.context import RequestContext

T = TypeVar("T")


class ClientLeft(ClientDisconnect):
    """The client disconnected before the work it asked for ended; the work was cancelled.
    Not caught, it is answered as any client that left (499, with nobody to read it)."""


def request_context(request: Request, request_id: str) -> RequestContext:
    return RequestContext(
        request_id=request_id,
        priority=Priority.from_header(request.headers.get("x-priority")),
        fault=parse_fault(request.headers.get(FAULT_HEADER)),
        owner=request_key_id(request.scope),
    )


@asynccontextmanager
async def cancel_on_disconnect(request: Request, cancel: Callable[[], None]) -> AsyncIterator[None]:
    """Within the block, a client that disconnects calls `cancel` (a whole, not
    streamed, answer: streams end with their response)."""
    watcher = asyncio.create_task(_watch(request, cancel))
    try:
        yield
    finally:
        watcher.cancel()


async def _watch(request: Request, cancel: Callable[[], None]) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            cancel()
            return


async def run_while_connected(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result (a whole, not streamed, answer); a client that disconnects first
    cancels it, and ClientLeft is raised."""
    job = asyncio.ensure_future(work)
    left = False

    def leave() -> None:
        nonlocal left
        left = True
        job.cancel()

    async with cancel_on_disconnect(request, leave):
        try:
            return await job
        except asyncio.CancelledError:
            if not left:
                raise
            raise ClientLeft from None
