"""The SSE response's keepalives: a timer beside the stream sends a comment (or an
API's own ping) only while the stream is silent, never inside or after its last
chunk, and a client going away closes the source at once."""

from __future__ import annotations

import asyncio

from mlxcel.http.sse import EventStreamResponse, Keepalive


class _Client:
    """An ASGI peer: records what the response sends (with the time), and can go away."""

    def __init__(self, paused_after: int | None = None) -> None:
        self.sent: list[tuple[float, dict]] = []
        self.gone = asyncio.Event()
        self.paused = asyncio.Event()
        self._paused_after = paused_after

    async def receive(self) -> dict:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict) -> None:
        if self._paused_after is not None and len(self.sent) >= self._paused_after:
            self.paused.set()
            await asyncio.sleep(0.3)  # a slow reader: the send waits for the socket to drain
        self.sent.append((asyncio.get_running_loop().time(), message))

    def bodies(self) -> list[bytes]:
        return [m["body"] for _, m in self.sent if m["type"] == "http.response.body"]


def _run(response: EventStreamResponse, client: _Client) -> None:
    asyncio.run(asyncio.wait_for(response({"type": "http"}, client.receive, client.send), 10))


def test_a_comment_fills_each_silence_and_none_follows_the_last_chunk():
    async def events():
        yield "data: 1\n\n"
        await asyncio.sleep(0.35)
        yield "data: 2\n\n"

    client = _Client()
    _run(EventStreamResponse(events(), ping_seconds=0.1), client)
    bodies = client.bodies()
    assert bodies[0] == b"data: 1\n\n"
    assert bodies[-2:] == [b"data: 2\n\n", b""]  # the final chunk ends it; no ping after it
    pings = bodies[1:-2]
    assert 1 <= len(pings) <= 3 and set(pings) == {b":\n\n"}  # at most one per 0.1 s of silence


def test_a_busy_stream_sends_no_ping():
    async def events():
        for n in range(20):
            await asyncio.sleep(0.01)
            yield f"data: {n}\n\n"

    client = _Client()
    _run(EventStreamResponse(events(), ping_seconds=0.5), client)
    assert b":\n\n" not in client.bodies()


def test_a_ping_waits_for_the_silence_to_last_its_interval():
    async def events():
        await asyncio.sleep(0.25)
        yield "data: late\n\n"

    client = _Client()
    _run(EventStreamResponse(events(), ping_seconds=0.1), client)
    start = client.sent[0][0]
    times = [t - start for t, m in client.sent if m.get("body") == b":\n\n"]
    assert times and times[0] >= 0.09  # never before the interval has passed
    assert all(later - earlier >= 0.09 for earlier, later in zip(times, times[1:]))


def test_an_api_ping_comes_only_after_the_first_chunk():
    async def events():
        await asyncio.sleep(0.25)
        yield "event: message_start\n\n"
        await asyncio.sleep(0.25)
        yield "event: message_stop\n\n"

    client = _Client()
    _run(EventStreamResponse(events(), keepalives=(Keepalive(0.1, b"event: ping\n\n", after_first_chunk=True),)),
         client)
    bodies = client.bodies()
    assert bodies[0] == b"event: message_start\n\n"
    assert b"event: ping\n\n" in bodies[1:-2] and bodies[-2:] == [b"event: message_stop\n\n", b""]


def test_a_ping_never_interleaves_with_a_slow_send():
    async def events():
        yield "data: 1\n\n"
        yield "data: 2\n\n"
        yield "data: 3\n\n"

    client = _Client(paused_after=2)  # the start and the first chunk go out, then each send takes 0.3 s
    _run(EventStreamResponse(events(), ping_seconds=0.05), client)
    bodies = client.bodies()
    assert bodies[-1] == b"" and [b for b in bodies if b.startswith(b"data")] == [b"data: 1\n\n", b"data: 2\n\n",
                                                                                 b"data: 3\n\n"]
    assert all(m.get("more_body") for _, m in client.sent[1:-1])


def test_a_client_going_away_closes_the_source_and_stops_the_pings():
    closed = []

    async def events():
        try:
            yield "data: 1\n\n"
            await asyncio.sleep(30)
            yield "data: never\n\n"
        finally:
            closed.append(True)

    client = _Client()

    async def run():
        response = EventStreamResponse(events(), ping_seconds=0.05, on_close=lambda: closed.append("on_close"))
        serving = asyncio.ensure_future(response({"type": "http"}, client.receive, client.send))
        await asyncio.sleep(0.2)
        client.gone.set()
        await asyncio.wait_for(serving, 2)
        count = len(client.sent)
        await asyncio.sleep(0.15)
        return count

    count = asyncio.run(run())
    assert closed == [True, "on_close"]
    assert len(client.sent) == count  # nothing is sent once the client has gone
    assert b":\n\n" in client.bodies()


def test_a_source_that_fails_mid_stream_fails_the_response_with_its_own_error_and_is_closed():
    closed = []

    class Broken(RuntimeError):
        pass

    async def events():
        try:
            yield "data: 1\n\n"
            raise Broken("the source broke")
        finally:
            closed.append("source")

    client = _Client()
    response = EventStreamResponse(events(), on_close=lambda: closed.append("on_close"))
    try:
        _run(response, client)
    except Broken as exc:  # the error itself, not a group of them: the middleware above sees what it knows
        assert str(exc) == "the source broke"
    else:
        raise AssertionError("the stream's failure was swallowed")
    assert client.bodies() == [b"data: 1\n\n"]  # no final chunk: the client sees a cut stream
    assert closed == ["source", "on_close"]
