"""The turn layer without a model: every GenerationRequest built complete in one place,
a group submitted all or nothing, and typed errors mapped to HTTP once at the edge."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from mlxcel.config import ServerConfig
from mlxcel.engine.engine_control import QueueFullError
from mlxcel.engine.faults import EngineFailedError, Fault
from mlxcel.engine.request import Failure, FinishEvent, FinishReason, Priority, Timings, TokenEvent
from mlxcel.engine.snapshot import EngineSnapshot
from mlxcel.http.errors import as_api_error
from mlxcel.turn.context import RequestContext
from mlxcel.turn.errors import (
    ContextOverflow,
    EngineUnavailable,
    GenerationFailed,
    InvalidRequest,
    NotFound,
    NotSupported,
    RateLimited,
    ServerBusy,
    generation_error,
)
from mlxcel.turn.generation import GenerationGroup
from mlxcel.turn.request_builder import TurnShaping, build_requests
from mlxcel.turn.sampling_fields import SamplingFields
from tests.unit.fake_runtime import FakeTokenizer

SLOT = 64


class FakeEngine:
    """Records submissions; refuses the n-th with the given error."""

    def __init__(self, refuse_at: int | None = None, error: Exception | None = None) -> None:
        self.submitted, self.cancelled = [], []
        self.refuse_at, self.error = refuse_at, error
        self.snapshot = EngineSnapshot()  # what a queue-full answer's Retry-After is estimated from
        self.capacity = 68  # four slots and the default queue cap

    def submit(self, request) -> None:
        if self.refuse_at is not None and len(self.submitted) == self.refuse_at:
            raise self.error
        self.submitted.append(request)

    def cancel(self, request_id: int) -> None:
        self.cancelled.append(request_id)


def _host(n_predict: int = -1):
    tokenizer = FakeTokenizer()
    tokenizer.n_vocab = 1000
    return SimpleNamespace(config=ServerConfig(model="m", n_predict=n_predict), tokenizer=tokenizer,
                           slot_context=SLOT, model_family=None)


def _build(fields: SamplingFields, prompts, max_tokens=None, context=None, shaping=None, engine=None):
    async def build():
        group = GenerationGroup(engine or FakeEngine())
        requests = build_requests(_host(), fields, prompts, max_tokens, context or RequestContext("r1"), group,
                                  shaping)
        return group, requests

    return asyncio.run(build())


def test_every_field_is_set_where_the_request_is_built():
    fields = SamplingFields(temperature=0.5, stop=["END"], ignore_eos=True, cache_prompt=False, seed=7,
                            logit_bias={"5": False})
    shaping = TurnShaping(constraints=["c0", "c1"], logprobs=3, reasoning_budget=10,
                          reasoning_markers=("<think>", "</think>"), reasoning_close_tokens=[9, 8],
                          reasoning_open_at_start=True)
    context = RequestContext("r1", priority=Priority.HIGH, fault=Fault.SAMPLE)
    _, (first, second) = _build(fields, [[1, 2], [3]], 5, context, shaping)
    assert (first.prompt_tokens, second.prompt_tokens) == ([1, 2], [3])
    assert first.sampling.temperature == 0.5 and first.sampling.seed == 7 and first.sampling.logit_bias == {
        5: float("-inf")}
    assert first.sampling is not second.sampling  # each request owns its parameters
    assert (first.max_tokens, first.stop, first.ignore_eos, first.cache_prompt) == (5, ["END"], True, False)
    assert (first.priority, first.fault) == (Priority.HIGH, Fault.SAMPLE)
    assert (first.constraint, second.constraint) == ("c0", "c1")
    assert (first.logprobs, first.reasoning_budget, first.reasoning_markers) == (3, 10, ("<think>", "</think>"))
    assert first.reasoning_close_tokens == [9, 8] and first.reasoning_open_at_start


def test_each_request_emits_into_its_own_sink_of_the_group():
    async def run():
        group = GenerationGroup(FakeEngine())
        requests = build_requests(_host(), SamplingFields(), [[1], [2]], None, RequestContext("r"), group)
        group.submit(requests)
        requests[1].emit(TokenEvent(token=4, text="x"))
        requests[1].emit(FinishEvent(FinishReason.STOP, 1, 1, 0, Timings()))
        requests[0].emit(FinishEvent(FinishReason.LENGTH, 1, 0, 0, Timings()))
        return await asyncio.wait_for(group.collect(), 5)

    first, second = asyncio.run(run())
    assert (first.text, first.finish.reason) == ("", FinishReason.LENGTH)
    assert (second.text, second.tokens, second.finish.reason) == ("x", [4], FinishReason.STOP)


def test_collecting_wakes_the_loop_once_a_finish_and_keeps_every_token_in_order():
    async def run():
        group = GenerationGroup(FakeEngine())
        requests = build_requests(_host(), SamplingFields(), [[1], [2]], None, RequestContext("r"), group)
        group.submit(requests)
        relay = group._relay
        wakes = []

        class CountingRelay:
            def call(self, callback, argument):
                wakes.append(argument[1])
                relay.call(callback, argument)

        group._relay = CountingRelay()
        requests[0].emit(TokenEvent(token=1, text="a"))  # before collect: it comes through the queue

        def engine_thread():
            for n in range(50):
                requests[n % 2].emit(TokenEvent(token=n, text=str(n % 10)))
            requests[1].emit(FinishEvent(FinishReason.STOP, 1, 25, 0, Timings()))
            requests[0].emit(FinishEvent(FinishReason.LENGTH, 1, 26, 0, Timings()))

        collecting = asyncio.ensure_future(group.collect())
        await asyncio.sleep(0.01)
        await asyncio.to_thread(engine_thread)
        return await asyncio.wait_for(collecting, 5), wakes

    (first, second), wakes = asyncio.run(run())
    assert first.tokens == [1, *range(0, 50, 2)] and first.text == "a" + "".join(str(n % 10) for n in range(0, 50, 2))
    assert second.tokens == list(range(1, 50, 2)) and second.finish.reason is FinishReason.STOP
    assert [type(event) for event in wakes] == [TokenEvent, FinishEvent, FinishEvent]


def test_limits_default_and_clamp_to_the_slot():
    _, (request,) = _build(SamplingFields(), [[1]], 10**9)
    assert request.max_tokens == SLOT
    _, (request,) = _build(SamplingFields(), [[1]], None)
    assert request.max_tokens == -1  # the server's -n default


def test_a_prompt_that_fills_the_slot_is_refused_with_its_sizes():
    with pytest.raises(ContextOverflow) as info:
        _build(SamplingFields(), [[1] * SLOT], None)
    assert info.value.extra == {"n_prompt_tokens": SLOT, "n_ctx": SLOT}
    # llama-server's body: its error type, the status as code, both sizes
    assert as_api_error(info.value).body() == {"error": {
        "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": SLOT, "n_ctx": SLOT,
        "message": f"request ({SLOT} tokens) exceeds the available context size ({SLOT} tokens), try increasing it"}}


def test_with_context_shift_a_limit_past_the_slot_stands_and_n_keep_is_passed_on():
    host = _host()
    host.config.context_shift, host.config.n_keep = True, 4

    async def build(fields, max_tokens):
        return build_requests(host, fields, [[1]], max_tokens, RequestContext("r"), GenerationGroup(FakeEngine()))

    (request,) = asyncio.run(build(SamplingFields(), 10**6))
    assert (request.max_tokens, request.n_keep, request.n_discard) == (10**6, 4, 0)
    (request,) = asyncio.run(build(SamplingFields(n_keep=-1, n_discard=9), None))
    assert (request.max_tokens, request.n_keep, request.n_discard) == (-1, -1, 9)


@pytest.mark.parametrize("error, kind", [(QueueFullError("full"), ServerBusy),
                                         (EngineFailedError("context broke"), EngineUnavailable)])
def test_a_group_is_submitted_whole_or_not_at_all(error, kind):
    engine = FakeEngine(refuse_at=1, error=error)
    with pytest.raises(kind):
        _build_and_submit(engine)
    assert len(engine.submitted) == 1 and engine.cancelled == [engine.submitted[0].id]


def test_a_group_larger_than_the_engine_ever_holds_is_refused_before_any_submission():
    engine = FakeEngine()
    engine.capacity = 1
    with pytest.raises(InvalidRequest, match="asks for 2 generations .* at most 1 at once"):
        _build_and_submit(engine)
    assert engine.submitted == [] and engine.cancelled == []


def _build_and_submit(engine):
    async def run():
        group = GenerationGroup(engine)
        group.submit(build_requests(_host(), SamplingFields(), [[1], [2]], None, RequestContext("r"), group))

    asyncio.run(run())


@pytest.mark.parametrize("error, status, kind", [
    (InvalidRequest("bad", "bad_field", n=1), 400, "invalid_request_error"),
    (NotFound("gone", "not_found"), 404, "invalid_request_error"),
    (RateLimited("later", "rate_limit_exceeded"), 429, "rate_limit_error"),
    (ServerBusy("busy"), 503, "server_busy"),
    (EngineUnavailable("the llama context failed"), 503, "unavailable_error"),
    (GenerationFailed("broke"), 500, "server_error"),
    (NotSupported("Infill is not supported by this model: ", code=501), 501, "not_supported_error"),
])
def test_typed_errors_map_to_statuses_once(error, status, kind):
    api = as_api_error(error)
    assert (api.status, api.type, api.code) == (status, kind, error.code)
    assert api.body()["error"]["message"] == error.message
    if isinstance(error, InvalidRequest):
        assert api.body()["error"]["n"] == 1


@pytest.mark.parametrize("failure, status, code", [
    (None, 500, None),
    (Failure.ENGINE, 503, "engine_failed"),
    (Failure.STOPPING, 503, "server_shutting_down"),
    (Failure.SHED, 503, "server_overloaded_shed"),
    (Failure.UNSATISFIABLE, 400, "unsatisfiable_request"),
])
def test_a_failed_generation_is_answered_by_its_kind(failure, status, code):
    failed = FinishEvent(FinishReason.ERROR, 1, 0, 0, Timings(), error="sampling broke", failure=failure)
    api = as_api_error(generation_error(failed))
    assert (api.status, api.code) == (status, code)
    assert "sampling broke" in api.body()["error"]["message"]


def test_the_event_inbox_hands_over_in_order_wakes_its_waiter_and_survives_a_cancelled_get():
    from mlxcel.turn.generation import EventInbox

    async def run():
        inbox = EventInbox()
        inbox.put(1)
        inbox.put(2)
        assert [await inbox.get(), await inbox.get()] == [1, 2]  # already there: no waiting
        waiting = asyncio.ensure_future(inbox.get())
        await asyncio.sleep(0)
        assert not waiting.done()  # nothing to take: it waits
        inbox.put(3)
        assert await asyncio.wait_for(waiting, 1) == 3
        abandoned = asyncio.ensure_future(inbox.get())
        await asyncio.sleep(0)
        abandoned.cancel()
        with pytest.raises(asyncio.CancelledError):
            await abandoned
        inbox.put(4)  # a put after the cancelled get is kept for the next one
        inbox.put(5)
        return [await asyncio.wait_for(inbox.get(), 1), await asyncio.wait_for(inbox.get(), 1)]

    assert asyncio.run(run()) == [4, 5]
