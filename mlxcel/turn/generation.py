"""Running engine requests from async handlers: events come back on this event
loop's queue; closing or cancelling a group cancels whatever is still running."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from mlxcel.engine.drain import retry_after_s
from mlxcel.engine.engine import Engine
from mlxcel.engine.engine_control import EngineStoppedError, QueueFullError
from mlxcel.engine.faults import EngineFailedError
from mlxcel.engine.request import (
    EngineEvent,
    FinishEvent,
    FinishReason,
    GenerationRequest,
    PromptProgressEvent,
    TokenEvent,
)
from mlxcel.turn.errors import EngineUnavailable, InvalidRequest, ServerBusy
from mlxcel.turn.loop_relay import relay_for


@dataclass
class Completion:
    """The gathered result of one request."""

    parts: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    events: list[TokenEvent] = field(default_factory=list)
    finish: FinishEvent | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)


class EventInbox:
    """One consumer's events on its event loop: a deque and the consumer's waiter.
    asyncio.Queue does the same for any number of getters and putters, at several
    times the cost of a token's hand-over."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: collections.deque = collections.deque()
        self._waiter: asyncio.Future | None = None

    def put(self, item) -> None:
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def get(self):
        while not self._items:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return self._items.popleft()


class GenerationGroup:
    """One or more engine requests submitted together (a prompt list fans out); their
    events come back on this event loop. `sink(i)` is request i's event sink: the
    request builder wires it in, so a request is complete when it is built."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._relay = relay_for(asyncio.get_running_loop())
        self._events = EventInbox()
        self.requests: list[GenerationRequest] = []
        self._open: set[int] = set()
        # Once `collect` runs, the engine thread leaves the tokens here and wakes this
        # loop only for a finish: a whole answer costs one wake-up, not one a token.
        self._gathering = False
        self._gathered: collections.deque[tuple[int, EngineEvent]] = collections.deque()

    def sink(self, index: int):
        def emit(event: EngineEvent) -> None:
            if self._gathering and not isinstance(event, FinishEvent):
                self._gathered.append((index, event))  # read back before the finish that follows it
                return
            self._relay.call(self._events.put, (index, event))

        return emit

    def submit(self, requests: list[GenerationRequest]) -> None:
        """Submit every request, or none: a full queue cancels those already in. More
        than the engine ever holds at once is the request's error, not a busy server's."""
        if len(requests) > self._engine.capacity:
            raise InvalidRequest(f"this request asks for {len(requests)} generations (n times the prompts); the server "
                                 f"holds at most {self._engine.capacity} at once (-np slots and --queue-cap)")
        self.requests = requests
        self._open = set(range(len(requests)))
        for n, request in enumerate(requests):
            try:
                self._engine.submit(request)
            except (QueueFullError, EngineStoppedError, EngineFailedError) as exc:
                for earlier in requests[:n]:
                    self._engine.cancel(earlier.id)
                self._open.clear()
                if isinstance(exc, EngineFailedError):
                    raise EngineUnavailable(str(exc)) from None
                raise ServerBusy("All slots are busy. Please try again later.", code="queue_full",
                                 retry_after=retry_after_s([self._engine.snapshot])) from None

    def cancel(self) -> None:
        for index in self._open:
            self._engine.cancel(self.requests[index].id)

    def stop(self, index: int) -> None:
        """End request `index` as finished (FinishReason.STOP): its caller has all it wants."""
        if index in self._open:
            self._engine.cancel(self.requests[index].id, FinishReason.STOP)

    async def events(self) -> AsyncIterator[tuple[int, EngineEvent]]:
        """Yields (request index, event) until every request has finished."""
        try:
            while self._open:
                index, event = await self._events.get()
                if isinstance(event, FinishEvent):
                    while self._gathered:  # every token a request emitted comes before its finish
                        yield self._gathered.popleft()
                    self._open.discard(index)
                yield index, event
        finally:
            self.cancel()

    async def collect(self) -> list[Completion]:
        """Gather every request's result."""
        self._gathering = True
        results = [Completion() for _ in self.requests]
        async for index, event in self.events():
            if isinstance(event, PromptProgressEvent):
                continue
            result = results[index]
            result.parts.append(event.text)
            if isinstance(event, TokenEvent):
                result.tokens.append(event.token)
                result.events.append(event)
            else:
                result.finish = event
        return results
