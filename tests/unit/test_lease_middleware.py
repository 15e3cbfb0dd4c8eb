"""The LeaseMiddleware ends a request's model lease as the response's last byte goes
out: a client that read the end of one answer and asks for another model must find
the first one idle (else it is deferred as busy)."""

from __future__ import annotations

import asyncio

from mlxcel.http.fleet_opening import LEASE_KEY, LeaseMiddleware


class CountedLease:
    """Released or not: idempotent, as the fleet's Lease is."""

    def __init__(self) -> None:
        self.released = False

    def release(self) -> None:
        self.released = True


def _serve(app) -> tuple[CountedLease, list[tuple[dict, int]]]:
    lease, sent = CountedLease(), []

    async def send(message: dict) -> None:
        sent.append((message, lease.released))  # whether the lease was released as each message went out

    async def receive() -> dict:
        return {"type": "http.disconnect"}

    scope = {"type": "http", "path": "/v1/chat/completions", "state": {LEASE_KEY: lease}}
    asyncio.run(LeaseMiddleware(app)(scope, receive, send))
    return lease, sent


def test_the_lease_is_released_before_the_last_byte():
    async def stream(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
        await asyncio.sleep(0)  # the route returns later still

    lease, sent = _serve(stream)
    assert [released for _, released in sent] == [False, False, True]


def test_a_route_that_fails_before_answering_still_releases():
    async def failing(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        raise RuntimeError("the client went away")

    lease = CountedLease()
    sent = []

    async def send(message: dict) -> None:
        sent.append(message)

    async def receive() -> dict:
        return {"type": "http.disconnect"}

    scope = {"type": "http", "path": "/v1/chat/completions", "state": {LEASE_KEY: lease}}
    try:
        asyncio.run(LeaseMiddleware(failing)(scope, receive, send))
    except RuntimeError:
        pass
    else:
        raise AssertionError("the route's failure must propagate")
    assert lease.released and len(sent) == 2
