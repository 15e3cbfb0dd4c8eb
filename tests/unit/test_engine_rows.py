"""What the engine publishes for /v1/metrics' requests[] and rates (running and queued
rows, the last requests' timings) and the governor's shed, over the fake runtime."""

from __future__ import annotations

import time

import pytest

from mlxcel.engine.request import Failure, FinishReason
from mlxcel.engine.slots import SlotState
from tests.unit.test_engine import make_rig, wait_idle, wait_until  # noqa: F401 - make_rig: the engine tests' fixture

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def rigs(make_rig):  # noqa: F811 - the fixture imported above
    return make_rig


def test_rows_show_the_running_request_and_the_queue_in_order(rigs):
    rig = rigs(n_parallel=1)
    rig.runtime.hold()
    running = rig.submit([1, 2, 3], max_tokens=100)
    rig.runtime.next_held()  # the prompt
    rig.runtime.allow()
    rig.runtime.next_held()  # its first token's decode
    queued = [rig.submit([9, 9], max_tokens=5), rig.submit([8], label="second")]
    rig.runtime.allow()
    rig.runtime.next_held()  # the engine drained its inbox and published before this step
    snap = rig.engine.snapshot
    slot = snap.slots[0]
    assert slot.state is SlotState.DECODE and slot.request_id == running.request.id
    assert slot.max_tokens == 100 and slot.n_prompt_tokens == 3 and slot.cache_tier == "miss" and slot.n_reused == 0
    assert slot.created <= slot.admitted_at <= slot.first_token_at <= snap.taken_at
    assert [(q.request_id, q.n_prompt_tokens, q.max_tokens) for q in snap.queued] == [
        (queued[0].request.id, 2, 5), (queued[1].request.id, 1, -1)]
    assert snap.speculative is False
    rig.engine.cancel(running.request.id)
    rig.engine.cancel(queued[1].request.id)
    rig.runtime.release()
    assert queued[0].wait().reason is FinishReason.LENGTH


def test_a_shed_request_finishes_as_shed_with_its_message(rigs):
    rig = rigs(n_parallel=1)
    rig.runtime.hold()
    running = rig.submit([1, 2, 3], max_tokens=100)
    rig.runtime.next_held()
    waiting = rig.submit([5], max_tokens=100)
    rig.engine.shed(running.request.id, "shed to free memory")
    rig.engine.shed(waiting.request.id, "shed while queued")
    since = time.monotonic()
    rig.runtime.release()
    finish = running.wait()
    assert (finish.reason, finish.failure, finish.error) == (FinishReason.ERROR, Failure.SHED, "shed to free memory")
    finish = waiting.wait()
    assert (finish.reason, finish.failure, finish.error) == (FinishReason.ERROR, Failure.SHED, "shed while queued")
    assert finish.completion_tokens == 0
    wait_idle(rig.engine, since)
    assert rig.submit([7], max_tokens=2).wait().reason is FinishReason.LENGTH  # the engine goes on


def test_finished_requests_leave_their_timings(rigs):
    rig = rigs(n_parallel=2)
    since = time.monotonic()
    for prompt in ([1, 2, 3, 4], [1, 2, 3, 4, 50, 51]):
        rig.submit(prompt, max_tokens=5).wait()
    wait_until(lambda: rig.engine.snapshot.taken_at >= since and len(rig.engine.snapshot.stats.recent) == 2)
    first, second = rig.engine.snapshot.stats.recent
    assert (first.prompt_tokens, first.prefill_tokens, first.generated) == (4, 4, 5)
    assert second.prompt_tokens == 6 and second.prefill_tokens == 2  # the first four came from the slot
    assert first.prefill_seconds >= 0 and first.decode_seconds >= 0
