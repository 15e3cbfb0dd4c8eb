"""The engine's step loop over a fake runtime: admission, generation, cancellation,
chunked prefill, prefix reuse and the fault paths, with no model.

Every wait has a timeout, so a broken engine fails a test instead of hanging it. The
fixture stops each engine and then checks what the fakes saw: no decode out of
position or past the batch, no row sampled without logits, and every sampler chain
freed exactly once."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from mlxcel.engine.engine import Engine
from mlxcel.engine.engine_config import EngineConfig
from mlxcel.engine.engine_control import EngineStoppedError, QueueFullError
from mlxcel.engine.faults import FAULT_INJECTION_ENV, EngineFailedError, Fault
from mlxcel.engine.prompt_cache import HostPromptCache
from mlxcel.engine.request import Failure, FinishReason, GenerationRequest, Priority
from mlxcel.engine.sampling import SamplingParams
from mlxcel.engine.slots import SlotState
from mlxcel.engine.snapshot import EngineSnapshot
from tests.unit.fake_runtime import (
    EOG,
    FakeRuntime,
    FakeSamplerFactory,
    FakeTokenizer,
    RequestEvents,
    expected_tokens,
    history_hash,
    successor,
)

pytestmark = pytest.mark.timeout(30)

POISON = 777  # a prompt starting with this token is the one a fault targets


@dataclass
class Rig:
    engine: Engine
    runtime: FakeRuntime
    samplers: FakeSamplerFactory
    failures: list[str]  # what on_failure was told

    def submit(self, prompt: list[int], label: str = "", order: list[str] | None = None, **kwargs) -> RequestEvents:
        events = RequestEvents(label, order)
        events.request = GenerationRequest(prompt_tokens=list(prompt), emit=events, **kwargs)
        self.engine.submit(events.request)
        return events


@pytest.fixture
def make_rig():
    rigs: list[Rig] = []

    def make(n_parallel=2, n_batch=64, n_ctx_seq=256, model=successor, start=True, fail_when=None,
             refuse_sampler=None, pieces=None, kv_unified=False, **config) -> Rig:
        runtime = FakeRuntime(n_parallel, n_batch, n_ctx_seq, model, kv_unified)
        samplers = FakeSamplerFactory(runtime, fail_when, refuse_sampler)
        failures: list[str] = []
        engine = Engine(runtime, FakeTokenizer(pieces),
                        EngineConfig(sampler=samplers, masker=None, on_failure=failures.append, **config))
        rig = Rig(engine, runtime, samplers, failures)
        rigs.append(rig)
        if start:
            engine.start()
        return rig

    yield make
    for rig in rigs:
        rig.runtime.release()
        rig.engine.stop(timeout=2.0)
    for rig in rigs:
        assert rig.runtime.violations == []
        assert [s.freed for s in rig.samplers.made] == [1] * len(rig.samplers.made), "a sampler leaked or freed twice"


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.002)


def wait_idle(engine: Engine, since: float, timeout: float = 5.0) -> EngineSnapshot:
    """The first snapshot published after `since` that shows every slot idle and nobody queued."""

    def idle() -> bool:
        snap = engine.snapshot
        return snap.taken_at >= since and snap.n_busy == 0 and snap.queue_depth == 0

    wait_until(idle, timeout)
    return engine.snapshot


def assert_all_idle(rig: Rig, since: float) -> None:
    snap = wait_idle(rig.engine, since)
    assert [view.state for view in snap.slots] == [SlotState.IDLE] * len(snap.slots)
    assert all(view.request_id == -1 for view in snap.slots)
    assert rig.engine.has_room


# -- admission and the queue cap --------------------------------------------------------


def test_waiting_requests_are_admitted_by_priority_then_arrival(make_rig):
    rig = make_rig(n_parallel=1)
    order: list[str] = []
    rig.runtime.hold()
    first = rig.submit([1], max_tokens=2, label="first", order=order)
    rig.runtime.next_held()  # `first` holds the only slot: the rest wait
    waiting = [("low1", Priority.LOW), ("normal1", Priority.NORMAL), ("high1", Priority.HIGH),
               ("normal2", Priority.NORMAL), ("low2", Priority.LOW), ("high2", Priority.HIGH)]
    events = [rig.submit([10 * (i + 1)], max_tokens=2, priority=priority, label=name, order=order)
              for i, (name, priority) in enumerate(waiting)]
    rig.runtime.release()
    for e in [first, *events]:
        assert e.wait().reason is FinishReason.LENGTH
        assert e.token_ids == expected_tokens(successor, e.request.prompt_tokens, 2)
    assert order == ["first", "high1", "high2", "normal1", "normal2", "low1", "low2"]


def test_a_burst_reaching_an_idle_engine_a_little_apart_is_prefilled_in_one_batch(make_rig, monkeypatch):
    """The event loop hands over requests sent together one by one: an idle engine
    waits for the rest of the burst (each within BURST_WAIT_S of the last) before its
    first decode, instead of prefilling the first alone while the others wait. The
    window is widened here so that the test does not race the engine thread."""
    from mlxcel.engine import engine as engine_module

    monkeypatch.setattr(engine_module, "BURST_WAIT_S", 0.2)
    monkeypatch.setattr(engine_module, "BURST_MAX_S", 2.0)
    rig = make_rig(n_parallel=4)
    events = []
    for n in range(3):
        events.append(rig.submit([10 * (n + 1), 5], max_tokens=2))
        time.sleep(0.03)  # far longer than the engine takes to start a decode
    for e in events:
        assert e.wait().reason is FinishReason.LENGTH
    assert len(set(rig.runtime.batches[0].seq_ids)) == 3  # all three in the first decode


def test_a_burst_gathers_no_more_requests_than_there_are_slots(make_rig, monkeypatch):
    """Once as many requests wait as there are slots, none that comes later could join
    the first batch: the engine starts at once instead of waiting out the window."""
    from mlxcel.engine import engine as engine_module

    monkeypatch.setattr(engine_module, "BURST_WAIT_S", 5.0)
    monkeypatch.setattr(engine_module, "BURST_MAX_S", 5.0)
    rig = make_rig(n_parallel=2)
    started = time.monotonic()
    events = [rig.submit([10 * (n + 1), 5], max_tokens=1) for n in range(2)]
    for e in events:
        assert e.wait(timeout=4.0).reason is FinishReason.LENGTH
    assert time.monotonic() - started < 4.0  # not the 5 s window
    assert len(set(rig.runtime.batches[0].seq_ids)) == 2


def test_a_lone_client_stops_paying_the_burst_wait_until_a_burst_is_missed(make_rig, monkeypatch):
    """After QUIET_WAKES wakes in a row on which no second request came, a lone request
    starts at once instead of waiting out BURST_WAIT_S; a request arriving while the
    engine works on an unwaited wake's request (a missed burst) brings the wait back."""
    from mlxcel.engine import engine as engine_module
    from mlxcel.engine.burst_watch import BurstWatch

    monkeypatch.setattr(engine_module, "BURST_WAIT_S", 0.6)
    monkeypatch.setattr(engine_module, "BURST_MAX_S", 0.6)
    rig = make_rig(n_parallel=2)
    rig.engine._bursts = BurstWatch(quiet_wakes=2)

    def lone_request_seconds() -> float:
        started = time.monotonic()
        assert rig.submit([7, 5], max_tokens=1).wait(timeout=5.0).reason is FinishReason.LENGTH
        return time.monotonic() - started

    assert [lone_request_seconds() >= 0.6 for _ in range(2)] == [True, True]  # waited, none came
    assert lone_request_seconds() < 0.3  # the third starts at once
    rig.runtime.hold()
    first = rig.submit([10, 5], max_tokens=2)
    rig.runtime.next_held()  # busy with the unwaited wake's request
    second = rig.submit([20, 5], max_tokens=2)  # well within BURST_MAX_S of that wake: missed
    released = time.monotonic()
    rig.runtime.release()
    for e in (first, second):
        assert e.wait(timeout=5.0).reason is FinishReason.LENGTH
    wait_idle(rig.engine, released)
    assert lone_request_seconds() >= 0.6  # waiting for bursts again


def test_a_pinned_request_runs_in_its_slot_and_waits_without_blocking_others(make_rig):
    rig = make_rig(n_parallel=2)
    order: list[str] = []
    rig.runtime.hold()
    holder = rig.submit([1], max_tokens=3, label="holder", order=order, id_slot=1)
    rig.runtime.next_held()  # slot 1 is busy now
    pinned = rig.submit([50], max_tokens=1, label="pinned", order=order, id_slot=1)
    free = rig.submit([60], max_tokens=1, label="free", order=order)
    rig.runtime.release()
    for e in (holder, pinned, free):
        assert e.wait().reason is FinishReason.LENGTH
    assert holder.finish.slot_id == pinned.finish.slot_id == 1
    assert free.finish.slot_id == 0
    assert order.index("free") < order.index("pinned")  # it went ahead of the request waiting for slot 1


def test_submit_past_the_queue_cap_raises_and_room_comes_back(make_rig):
    rig = make_rig(n_parallel=1, queue_cap=2, start=False)
    events = []
    for _ in range(3):  # one slot + a queue of two
        assert rig.engine.has_room
        events.append(rig.submit([5], max_tokens=1))
    assert not rig.engine.has_room
    with pytest.raises(QueueFullError):
        rig.submit([5], max_tokens=1)
    assert rig.engine.stats.rejected_queue_full == 1
    rig.engine.cancel(events[2].request.id)
    since = time.monotonic()
    rig.engine.start()
    assert [e.wait().reason for e in events] == [FinishReason.LENGTH, FinishReason.LENGTH, FinishReason.CANCELLED]
    assert_all_idle(rig, since)
    again = rig.submit([5], max_tokens=1)
    assert again.wait().reason is FinishReason.LENGTH


# -- generation ------------------------------------------------------------------------


def test_tokens_come_in_order_and_max_tokens_ends_with_length(make_rig):
    rig = make_rig()
    events = rig.submit([10, 11, 12], max_tokens=4, sampling=SamplingParams(seed=42))
    finish = events.wait()
    assert events.token_ids == [13, 14, 15, 16]
    assert [e.text for e in events.tokens] == ["<13>", "<14>", "<15>", "<16>"]
    assert finish.reason is FinishReason.LENGTH and not finish.stopped_by_eos and finish.error is None
    assert (finish.prompt_tokens, finish.completion_tokens, finish.seed) == (3, 4, 42)
    assert events.n_finish == 1 and events.late == []
    # the prompt was decoded once, then one token per step at the next position
    seq = finish.slot_id
    decoded = [(b.tokens_of(seq), b.positions_of(seq)) for b in rig.runtime.batches]
    assert decoded == [([10, 11, 12], [0, 1, 2]), ([13], [3]), ([14], [4]), ([15], [5])]


def test_a_steps_events_wake_their_loop_as_the_next_decode_starts_and_the_last_when_idle(make_rig):
    """An event loop woken at the end of a turn would take the GIL from the next turn's
    Python; the engine holds its wake-ups until the next decode releases the GIL (or
    until it has nothing to decode)."""
    from mlxcel.engine import held_wakeups

    rig = make_rig()
    woken: list = []  # the events, in the order their wake-ups went out
    at_decode: list[int] = []  # how many had gone out as each decode started
    rig.runtime.on_decode = lambda: at_decode.append(len(woken))
    events = RequestEvents()

    def emit(event) -> None:  # as LoopRelay: a holding thread defers the wake-up
        events(event)
        if not held_wakeups.defer(lambda: woken.append(event)):
            woken.append(event)

    rig.engine.submit(GenerationRequest(prompt_tokens=[10, 11, 12], emit=emit, max_tokens=4))
    finish = events.wait()
    wait_until(lambda: len(woken) == 5)  # the finish too, once the engine went idle
    assert [getattr(e, "token", None) for e in woken[:4]] == [13, 14, 15, 16] and woken[4] is finish
    # the prompt's decode, then one per token: each starts with the previous step's token still held
    assert at_decode == [0, 0, 1, 2]


def test_an_end_of_generation_token_stops_without_being_emitted(make_rig):
    rig = make_rig()
    events = rig.submit([EOG - 4], max_tokens=10)
    finish = events.wait()
    assert events.token_ids == [EOG - 3, EOG - 2, EOG - 1]
    assert finish.reason is FinishReason.STOP and finish.stopped_by_eos
    assert finish.completion_tokens == 4  # the end-of-generation token counts


def test_with_special_tokens_rendered_the_end_token_s_text_ends_the_output(make_rig):
    rig = make_rig(pieces={EOG: b"<end>"})
    rig.engine.tokenizer.render_special = True  # -sp
    events = rig.submit([EOG - 2], max_tokens=10)
    finish = events.wait()
    assert events.token_ids == [EOG - 1, EOG] and events.text.endswith("<end>")
    assert finish.reason is FinishReason.STOP and finish.stopped_by_eos and finish.completion_tokens == 2


def test_ignore_eos_bans_the_end_of_generation_tokens_from_sampling(make_rig):
    rig = make_rig()
    events = rig.submit([EOG - 2], max_tokens=4, ignore_eos=True)
    assert events.wait().reason is FinishReason.LENGTH
    assert rig.samplers.calls[-1].banned_tokens == frozenset({EOG})
    assert events.token_ids == [EOG - 1, 0, 1, 2]  # the fake sampler skips banned tokens


def test_a_stop_string_across_tokens_is_held_back_and_cut(make_rig):
    rig = make_rig()
    events = rig.submit([4], max_tokens=10, stop=["6><7"])
    finish = events.wait()
    assert finish.reason is FinishReason.STOP and finish.stop_word == "6><7" and not finish.stopped_by_eos
    assert events.token_ids == [5, 6, 7]
    assert events.text == "<5><"


def test_a_partial_stop_string_is_released_when_generation_ends(make_rig):
    rig = make_rig()
    events = rig.submit([4], max_tokens=5, stop=["<9>!"])
    finish = events.wait()
    assert finish.reason is FinishReason.LENGTH and finish.stop_word is None
    assert finish.text == "<9>"  # held back as a possible stop string, released at the end
    assert events.text == "<5><6><7><8><9>"


def test_a_character_split_across_tokens_is_emitted_whole(make_rig):
    rig = make_rig(pieces={50: "é".encode()[:1], 51: "é".encode()[1:]})
    events = rig.submit([49], max_tokens=3)
    events.wait()
    assert [e.text for e in events.tokens] == ["", "é", "<52>"]


# -- cancellation -----------------------------------------------------------------------


def test_cancel_while_waiting_in_the_queue(make_rig):
    rig = make_rig(n_parallel=1)
    rig.runtime.hold()
    running = rig.submit([1], max_tokens=3)
    rig.runtime.next_held()
    queued = rig.submit([POISON], max_tokens=3)
    rig.engine.cancel(queued.request.id)
    since = time.monotonic()
    rig.runtime.release()
    finish = queued.wait()
    assert finish.reason is FinishReason.CANCELLED and finish.completion_tokens == 0 and queued.tokens == []
    assert running.wait().reason is FinishReason.LENGTH
    assert not any(POISON in b.tokens for b in rig.runtime.batches)  # never admitted
    assert len(rig.samplers.made) == 1
    assert_all_idle(rig, since)


def test_cancel_during_chunked_prefill_leaves_the_decoding_slot_alone(make_rig):
    rig = make_rig(n_parallel=2, prefill_chunk=4)
    rig.runtime.hold()
    decoding = rig.submit([1, 2], max_tokens=12)
    rig.runtime.next_held()  # its prompt
    prompt = list(range(200, 220))
    prefilling = rig.submit(prompt, max_tokens=3)
    rig.runtime.allow()
    batch = rig.runtime.next_held()  # the decoding slot's token and the first chunk of the long prompt
    assert sorted(len(batch.tokens_of(s)) for s in batch.seqs) == [1, 4]
    rig.engine.cancel(prefilling.request.id)
    since = time.monotonic()
    rig.runtime.release()
    finish = prefilling.wait()
    assert finish.reason is FinishReason.CANCELLED and prefilling.tokens == [] and finish.completion_tokens == 0
    assert decoding.wait().reason is FinishReason.LENGTH
    assert decoding.token_ids == expected_tokens(successor, [1, 2], 12)
    seq = finish.slot_id
    assert sum(1 for b in rig.runtime.batches if seq in b.seqs) == 1  # nothing prefilled after the cancel
    assert rig.runtime.memory[seq] == prompt[:4]  # the chunk stays, a prefix to reuse
    assert_all_idle(rig, since)
    again = rig.submit(prompt, max_tokens=2)
    assert again.wait().cached_tokens == 4
    assert again.token_ids == expected_tokens(successor, prompt, 2)


def test_cancel_while_decoding_takes_effect_at_the_next_step(make_rig):
    rig = make_rig(n_parallel=1)
    rig.runtime.hold()
    events = rig.submit([1, 2, 3], max_tokens=100)
    assert len(rig.runtime.next_held().tokens) == 3  # the prompt
    rig.runtime.allow()
    assert rig.runtime.next_held().tokens == [4]  # decoding the first token
    rig.engine.cancel(events.request.id)
    since = time.monotonic()
    rig.runtime.release()
    finish = events.wait()
    assert finish.reason is FinishReason.CANCELLED and finish.error is None
    assert events.token_ids == [4, 5]  # the step in flight still samples its token
    assert finish.completion_tokens == 2
    assert_all_idle(rig, since)
    rig.engine.cancel(events.request.id)  # cancelling a finished request changes nothing
    assert rig.submit([7], max_tokens=1).wait().reason is FinishReason.LENGTH


# -- chunked prefill --------------------------------------------------------------------


def long_prompt_beside_a_decoding_slot(rig: Rig, prompt: list[int]) -> tuple[RequestEvents, RequestEvents]:
    """A 30-token generation, and `prompt` (3 tokens out) admitted once it decodes."""
    rig.runtime.hold()
    short = rig.submit([1, 2], max_tokens=30)
    rig.runtime.next_held()
    long = rig.submit(prompt, max_tokens=3)
    rig.runtime.release()
    return short, long


def test_a_long_prompt_is_prefilled_in_chunks_while_another_slot_decodes(make_rig):
    rig = make_rig(n_parallel=2, prefill_chunk=4)
    prompt = list(range(200, 220))
    short, long = long_prompt_beside_a_decoding_slot(rig, prompt)
    f_short, f_long = short.wait(), long.wait()
    assert short.token_ids == expected_tokens(successor, [1, 2], 30)
    assert long.token_ids == expected_tokens(successor, prompt, 3)
    a, b = f_short.slot_id, f_long.slot_id
    chunks = [batch for batch in rig.runtime.batches if b in batch.seqs and batch.positions_of(b)[0] < len(prompt)]
    assert [len(batch.tokens_of(b)) for batch in chunks] == [4, 4, 4, 4, 4]
    assert [t for batch in chunks for t in batch.tokens_of(b)] == prompt
    assert [p for batch in chunks for p in batch.positions_of(b)] == list(range(len(prompt)))
    for batch in chunks:  # each chunk rode along with the other slot's next token
        assert len(batch.tokens_of(a)) == 1 and batch.positions_of(a)[0] >= 2
    wants_logits = [w for batch in chunks for w, s in zip(batch.logits, batch.seq_ids) if s == b]
    assert wants_logits == [False] * (len(prompt) - 1) + [True]  # only the prompt's last token


def test_a_long_prompt_primes_its_sampler_a_share_a_step_while_it_prefills(make_rig, monkeypatch):
    monkeypatch.setattr("mlxcel.engine.engine.PRIME_TOKENS_PER_STEP", 3)
    rig = make_rig(n_parallel=2, prefill_chunk=4)
    prompt = list(range(200, 220))
    short, long = long_prompt_beside_a_decoding_slot(rig, prompt)
    short.wait(), long.wait()
    sampler = next(s for s in rig.samplers.made if s.primed and s.primed[0] == 200)
    assert sampler.primed == prompt  # all of it, in order
    # 5 chunks of 4: a share after each of the first 4 steps, the last 8 before the first draw
    assert sampler.prime_shares == [3, 3, 3, 3, 8] and sampler.sampled_unprimed == 1


def test_prefilling_slots_share_the_chunk_oldest_first(make_rig):
    rig = make_rig(n_parallel=3, prefill_chunk=4)
    rig.runtime.hold()
    decoding = rig.submit([1], max_tokens=20)
    rig.runtime.next_held()
    first, second = rig.submit(list(range(200, 210)), max_tokens=1), rig.submit(list(range(300, 306)), max_tokens=1)
    rig.runtime.release()
    f_first, f_second = first.wait(), second.wait()
    decoding.wait()
    a, b = f_first.slot_id, f_second.slot_id
    shares = [(len(batch.tokens_of(a)), len(batch.tokens_of(b))) for batch in rig.runtime.batches[1:5]]
    assert shares == [(4, 0), (4, 0), (2, 2), (0, 4)]  # then `first` decodes nothing more: max_tokens=1


def test_generation_ends_with_length_at_the_end_of_the_slot_context(make_rig):
    rig = make_rig(n_parallel=1, n_ctx_seq=8)
    events = rig.submit([10, 11, 12, 13, 14], ignore_eos=True)
    finish = events.wait()
    # as llama-server: generation stops once the next position would be the context's last
    assert finish.reason is FinishReason.LENGTH and events.token_ids == [15, 16, 17]
    assert max(p for batch in rig.runtime.batches for p in batch.positions) == 6


def test_a_lone_prompt_fills_the_batch_regardless_of_the_chunk(make_rig):
    rig = make_rig(n_parallel=2, n_batch=16, prefill_chunk=4)
    prompt = list(range(300, 340))
    events = rig.submit(prompt, max_tokens=1)
    assert events.wait().reason is FinishReason.LENGTH
    assert [len(batch.tokens) for batch in rig.runtime.batches] == [16, 16, 8]


# -- one request fails, the rest go on -----------------------------------------------------


def poisoned(history: list[int]) -> bool:
    return history[0] == POISON


def test_a_sampler_that_raises_fails_that_request_alone(make_rig):
    rig = make_rig(n_parallel=2, fail_when=poisoned)
    bad = rig.submit([POISON, 1], max_tokens=5)
    good = rig.submit([10, 11], max_tokens=5)
    finish = bad.wait()
    assert finish.reason is FinishReason.ERROR and "sampling" in finish.error and finish.failure is not Failure.ENGINE
    assert good.wait().reason is FinishReason.LENGTH
    assert good.token_ids == expected_tokens(successor, [10, 11], 5)
    assert rig.runtime.memory[finish.slot_id] == []  # a failed request's sequence is not trusted
    assert rig.engine.alive and rig.engine.failure is None and rig.failures == []


def test_a_sampler_that_cannot_be_built_fails_that_request_at_admission(make_rig):
    rig = make_rig(n_parallel=1, refuse_sampler=lambda params: params.seed == 13)
    bad = rig.submit([1], max_tokens=2, sampling=SamplingParams(seed=13))
    good = rig.submit([5], max_tokens=2)
    finish = bad.wait()
    assert finish.reason is FinishReason.ERROR and "admitting" in finish.error
    assert good.wait().reason is FinishReason.LENGTH and good.token_ids == [6, 7]
    assert rig.engine.alive


def test_an_empty_prompt_fails_at_admission_and_decodes_nothing(make_rig):
    rig = make_rig(n_parallel=2)
    rig.runtime.hold()
    running = rig.submit([5], max_tokens=4)
    rig.runtime.next_held()
    empty = rig.submit([], max_tokens=3)  # the HTTP edge refuses these; the engine must not trust it did
    rig.runtime.release()
    finish = empty.wait()
    assert finish.reason is FinishReason.ERROR and "admitting" in finish.error and empty.tokens == []
    assert running.wait().reason is FinishReason.LENGTH and running.token_ids == [6, 7, 8, 9]
    alone = rig.submit([], max_tokens=3)
    assert alone.wait().reason is FinishReason.ERROR
    assert rig.engine.alive


def test_a_batch_refused_for_holding_several_sequences_is_split(make_rig):
    rig = make_rig(n_parallel=3, model=history_hash)
    rig.runtime.refuse = lambda batch: 1 if len(batch.seqs) > 1 else 0
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    events = [rig.submit(p, max_tokens=6) for p in prompts]
    for e, prompt in zip(events, prompts):
        assert e.wait().reason is FinishReason.LENGTH
        assert e.token_ids == expected_tokens(history_hash, prompt, 6)  # memory was rewound right
    assert any(batch.rc == 1 for batch in rig.runtime.batches)
    assert all(len(batch.seqs) == 1 for batch in rig.runtime.batches if batch.rc == 0)
    assert rig.engine.alive


def test_a_sequence_refused_even_alone_fails_only_its_request(make_rig):
    rig = make_rig(n_parallel=3, model=history_hash)
    rig.runtime.refuse = lambda batch: 1 if any(batch.holds_prompt(s, POISON) for s in batch.seqs) else 0
    good = [rig.submit([1, 2], max_tokens=5), rig.submit([3, 4, 5], max_tokens=5)]
    bad = rig.submit([POISON, 6], max_tokens=5)
    finish = bad.wait()
    assert finish.reason is FinishReason.ERROR and "llama_decode failed (1)" in finish.error
    assert finish.failure is not Failure.ENGINE
    for e in good:
        assert e.wait().reason is FinishReason.LENGTH
        assert e.token_ids == expected_tokens(history_hash, e.request.prompt_tokens, 5)
    assert rig.engine.alive and rig.engine.failure is None and rig.failures == []


# -- the engine itself fails --------------------------------------------------------------


def assert_engine_failed(rig: Rig, events: list[RequestEvents], reason_part: str, since: float) -> None:
    for e in events:
        finish = e.wait()
        assert finish.reason is FinishReason.ERROR and finish.failure is Failure.ENGINE, finish
        assert reason_part in finish.error
    wait_until(lambda: rig.failures)
    rig.engine.stop(timeout=2.0)
    assert len(rig.failures) == 1 and reason_part in rig.failures[0]
    assert rig.engine.failure == rig.failures[0] and not rig.engine.alive
    with pytest.raises(EngineFailedError):
        rig.submit([1], max_tokens=1)
    assert_all_idle(rig, since)


def test_a_lone_sequence_the_context_fails_fails_the_engine(make_rig):
    rig = make_rig(n_parallel=2)
    rig.runtime.refuse = lambda batch: -3 if any(batch.holds_prompt(s, POISON) for s in batch.seqs) else 0
    since = time.monotonic()
    events = [rig.submit([1], max_tokens=50), rig.submit([POISON], max_tokens=50), rig.submit([2], max_tokens=50)]
    assert_engine_failed(rig, events, "llama_decode returned -3", since)


def test_a_command_whose_caller_went_away_is_dropped_not_answered(make_rig):
    """A shutdown cancels the HTTP handlers still waiting on the engine: answering a
    cancelled future raises InvalidStateError, which would crash the engine thread."""
    rig = make_rig(n_parallel=2, start=False)
    gone = [rig.engine.end_reasoning(1), rig.engine.set_lora_scales([])]
    for future in gone:
        assert future.cancel()
    waiting = rig.engine.end_reasoning(2)
    rig.engine.start()
    assert waiting.result(timeout=5) is False
    assert rig.submit([1], max_tokens=3).wait().reason is FinishReason.LENGTH and rig.failures == []
    assert all(future.cancelled() for future in gone)


def test_an_exception_in_the_engine_thread_fails_the_engine(make_rig):
    rig = make_rig(n_parallel=2)
    calls = []

    def explode(batch):
        calls.append(batch)
        if len(calls) == 3:
            raise RuntimeError("boom")
        return 0

    rig.runtime.refuse = explode
    since = time.monotonic()
    events = [rig.submit([1], max_tokens=50), rig.submit([2], max_tokens=50), rig.submit([3], max_tokens=50)]
    assert_engine_failed(rig, events, "RuntimeError: boom", since)


def test_a_crash_while_admitting_fails_the_request_being_admitted(make_rig, monkeypatch):
    monkeypatch.setenv(FAULT_INJECTION_ENV, "1")
    rig = make_rig(n_parallel=2)
    rig.runtime.hold()
    running = rig.submit([1], max_tokens=5)
    rig.runtime.next_held()
    since = time.monotonic()
    crashing = rig.submit([2], max_tokens=5, fault=Fault.CRASH)  # raises in the thread, outside any request
    rig.runtime.release()
    assert_engine_failed(rig, [running, crashing], "InjectedFault", since)


def test_stopping_finishes_every_request_as_shut_down(make_rig):
    rig = make_rig(n_parallel=1)
    rig.runtime.hold()
    running, queued = rig.submit([1], max_tokens=50), rig.submit([2], max_tokens=50)
    rig.runtime.next_held()
    rig.engine.stop(timeout=0)  # asks, without waiting for the thread held in its decode
    rig.runtime.release()
    for e in (running, queued):
        finish = e.wait()
        assert finish.reason is FinishReason.ERROR and finish.failure is not Failure.ENGINE
        assert "shutting down" in finish.error
    assert rig.failures == [] and rig.engine.failure is None
    with pytest.raises(EngineStoppedError):
        rig.submit([3], max_tokens=1)


# -- prefix reuse -----------------------------------------------------------------------


def test_a_shared_prefix_is_reused_and_only_the_rest_prefilled(make_rig):
    rig = make_rig(n_parallel=1, model=history_hash)
    first_prompt = list(range(1, 13))
    assert rig.submit(first_prompt, max_tokens=3).wait().cached_tokens == 0
    n_before = len(rig.runtime.batches)
    prompt = first_prompt[:8] + [50, 51, 52]
    events = rig.submit(prompt, max_tokens=3)
    finish = events.wait()
    assert finish.cached_tokens == 8 and finish.timings.cache_n == 8 and finish.timings.prompt_n == 3
    assert finish.timings.cache_tier == "slot"
    prefill = rig.runtime.batches[n_before]
    assert (prefill.tokens, prefill.positions) == ([50, 51, 52], [8, 9, 10])
    assert events.token_ids == expected_tokens(history_hash, prompt, 3)  # the cut left exactly the prefix


def test_a_repeated_prompt_decodes_only_its_last_token_again(make_rig):
    rig = make_rig(n_parallel=1, model=history_hash)
    prompt = list(range(1, 13))
    first = rig.submit(prompt, max_tokens=2)
    first.wait()
    n_before = len(rig.runtime.batches)
    again = rig.submit(prompt, max_tokens=2)
    assert again.wait().cached_tokens == len(prompt) - 1
    assert rig.runtime.batches[n_before].tokens == prompt[-1:]  # its logits are needed again
    assert again.token_ids == first.token_ids


def test_a_prefix_is_copied_from_a_slot_still_generating(make_rig):
    rig = make_rig(n_parallel=2, model=history_hash)
    shared = list(range(1, 41))
    rig.runtime.hold()
    running = rig.submit(shared, max_tokens=10)
    rig.runtime.next_held()
    events = rig.submit(shared + [60, 61], max_tokens=4)
    rig.runtime.release()
    finish = events.wait()
    assert finish.cached_tokens == 40 and finish.timings.cache_tier == "slot"
    assert next(b.tokens_of(finish.slot_id) for b in rig.runtime.batches if finish.slot_id in b.seqs) == [60, 61]
    assert events.token_ids == expected_tokens(history_hash, shared + [60, 61], 4)
    assert running.wait().reason is FinishReason.LENGTH
    assert running.token_ids == expected_tokens(history_hash, shared, 10)


def test_a_request_that_opts_out_of_caching_leaves_nothing_behind(make_rig):
    rig = make_rig(n_parallel=1)
    prompt = list(range(1, 13))
    finish = rig.submit(prompt, max_tokens=2, cache_prompt=False).wait()
    assert rig.runtime.memory[finish.slot_id] == []
    assert rig.submit(prompt, max_tokens=2).wait().cached_tokens == 0


def test_a_prefix_evicted_from_its_slot_comes_back_from_the_host_cache(make_rig):
    cache = HostPromptCache(capacity_bytes=1 << 20, max_entries=8, ttl_seconds=0)
    rig = make_rig(n_parallel=1, model=history_hash, host_cache=cache)
    prompt = list(range(1, 41))
    rig.submit(prompt, max_tokens=2).wait()
    rig.submit(list(range(500, 540)), max_tokens=2).wait()  # takes the only slot over
    n_before = len(rig.runtime.batches)
    events = rig.submit(prompt + [7, 8], max_tokens=3)
    finish = events.wait()
    assert finish.cached_tokens == 40 and finish.timings.cache_tier == "exact"
    assert rig.runtime.batches[n_before].tokens == [7, 8]
    assert events.token_ids == expected_tokens(history_hash, prompt + [7, 8], 3)


# -- speculation ------------------------------------------------------------------------


def periodic_with_surprises(history: list[int]) -> int:
    """Repeats the token five back, except at every seventh position: prompt lookup
    drafts well, and some drafts are rejected."""
    return history[-5] if len(history) % 7 else 900 + len(history) % 50


def test_prompt_lookup_speculation_yields_exactly_the_plain_tokens(make_rig):
    rig = make_rig(n_parallel=2, model=periodic_with_surprises, lookup_ngram=2)
    prompts = [[1, 2, 3, 4, 5] * 3, [7, 8, 9, 7, 8, 9, 7, 8]]
    events = [rig.submit(prompt, max_tokens=30) for prompt in prompts]
    for e, prompt in zip(events, prompts):
        finish = e.wait()
        assert finish.reason is FinishReason.LENGTH
        assert e.token_ids == expected_tokens(periodic_with_surprises, prompt, 30)  # rejected drafts were cut
    timings = events[0].finish.timings
    assert timings.draft_rounds > 0 and 0 < timings.draft_n_accepted < timings.draft_n


def de_bruijn(k: int, n: int) -> list[int]:
    """A sequence over k symbols in which every n-gram occurs once (cyclically)."""
    a, out = [0] * k * n, []

    def db(t: int, p: int) -> None:
        if t > n:
            if n % p == 0:
                out.extend(a[1 : p + 1])
            return
        a[t] = a[t - p]
        db(t + 1, p)
        for j in range(a[t - p] + 1, k):
            a[t] = j
            db(t + 1, t)

    db(1, 1)
    return out


NEVER_COPIED = de_bruijn(4, 3)  # 64 tokens: each pair recurs with a new follower, no triple recurs


def never_copies(history: list[int]) -> int:
    """Text whose every 2-gram recurs but never with the follower it had before, in
    the first 64 tokens: each prompt-lookup proposal fails at its first token."""
    return 100 + NEVER_COPIED[len(history) % len(NEVER_COPIED)]


def test_four_streams_on_a_cpu_draft_nothing_that_never_pays(make_rig):
    """Short matches must prove themselves (on proposals followed but not drafted)
    and are sized against the whole batch: on a CPU curve, four streams of text
    that is never copied verify no draft at all, and generate the plain tokens."""
    from mlxcel.engine.draft_policy import DecodeCosts
    from tests.unit.test_draft_policy import CPU

    rig = make_rig(n_parallel=4, model=never_copies, lookup_ngram=2, decode_costs=DecodeCosts(CPU))
    prompts = [[1, 2, 3, 4][: i + 1] for i in range(4)]
    events = [rig.submit(prompt, max_tokens=56) for prompt in prompts]
    for e, prompt in zip(events, prompts):
        assert e.wait().reason is FinishReason.LENGTH
        assert e.token_ids == expected_tokens(never_copies, prompt, 56)
        assert e.finish.timings.draft_n == 0
    assert max(len(batch.tokens) for batch in rig.runtime.batches[1:]) == 4


def test_a_stream_that_starts_copying_drafts_again(make_rig):
    """The same stream, once its text repeats (a long match), drafts at once."""
    from mlxcel.engine.draft_policy import DecodeCosts
    from tests.unit.test_draft_policy import CPU

    def copies_later(history: list[int]) -> int:
        return never_copies(history) if len(history) < 40 else history[-30]

    rig = make_rig(n_parallel=1, model=copies_later, lookup_ngram=2, decode_costs=DecodeCosts(CPU))
    events = rig.submit([1], max_tokens=120)
    assert events.wait().reason is FinishReason.LENGTH
    assert events.token_ids == expected_tokens(copies_later, [1], 120)
    timings = events.finish.timings
    assert timings.draft_n_accepted > 40 and timings.draft_n_accepted >= 0.8 * timings.draft_n


def repeats_six_back(history: list[int]) -> int:
    return history[-6]


def test_with_a_kv_stream_per_slot_copying_streams_draft_together_at_one_length(make_rig):
    """llama.cpp runs drafts of equal length on neighbouring slots as one micro-batch
    and a slot's longer drafts as one of their own: sized together, four streams that
    copy draft alike every step; in one KV pool (batches run whole) the slot sized
    last holds back, as each slot sees the batch the others' drafts made dearer."""
    from mlxcel.engine.draft_policy import DecodeCosts
    from tests.unit.test_draft_policy import CPU

    shapes = {}
    for unified in (False, True):
        rig = make_rig(n_parallel=4, model=repeats_six_back, lookup_ngram=2, decode_costs=DecodeCosts(CPU),
                       kv_unified=unified)
        prompts = [[10 * i + j for j in range(6)] * 2 for i in range(4)]
        events = [rig.submit(prompt, max_tokens=60) for prompt in prompts]
        for e, prompt in zip(events, prompts):
            assert e.wait().reason is FinishReason.LENGTH
            assert e.token_ids == expected_tokens(repeats_six_back, prompt, 60)
        shapes[unified] = [[len(batch.tokens_of(seq)) for seq in sorted(batch.seqs)] for batch in rig.runtime.batches]
    # after the prompts and the first token (nothing to copy from yet): every step drafts, alike
    assert shapes[False][2:] and all(len(set(shape)) == 1 and shape[0] > 1 for shape in shapes[False][2:])
    assert any(len(set(shape)) > 1 for shape in shapes[True][2:])
    assert len(shapes[False]) < len(shapes[True])


def test_an_output_written_before_is_drafted_from_the_traffic_and_its_last_round_counts(make_rig):
    """The successor model never repeats itself, so prompt lookup alone drafts nothing;
    a second request whose output the first already wrote drafts it from the traffic,
    in one round that ends the request (counted in its timings all the same)."""
    rig = make_rig(n_parallel=1, lookup_ngram=2, traffic_tokens=1024)
    first = rig.submit([1, 2, 3], max_tokens=20)
    assert first.wait().timings.draft_rounds == 0
    second = rig.submit([50, 2, 3], max_tokens=20)
    timings = second.wait().timings
    assert second.token_ids == first.token_ids == list(range(4, 24))
    assert (timings.draft_rounds, timings.draft_n, timings.draft_n_accepted) == (1, 18, 18)
    assert (rig.engine.stats.traffic_draft_tokens, rig.engine.stats.traffic_draft_accepted) == (18, 18)


def test_without_traffic_tokens_nothing_is_drafted_from_earlier_outputs(make_rig):
    rig = make_rig(n_parallel=1, lookup_ngram=2, traffic_tokens=0)
    rig.submit([1, 2, 3], max_tokens=20).wait()
    second = rig.submit([50, 2, 3], max_tokens=20)
    assert second.wait().timings.draft_rounds == 0 and second.token_ids == list(range(4, 24))
    assert rig.engine.traffic is None


def test_a_request_that_opts_out_of_caching_neither_drafts_from_nor_adds_to_the_traffic(make_rig):
    rig = make_rig(n_parallel=1, lookup_ngram=2, traffic_tokens=1024)
    rig.submit([1, 2, 3], max_tokens=20, cache_prompt=False).wait()
    assert rig.engine.traffic.sequences == 0  # it donated nothing
    rig.submit([1, 2, 3], max_tokens=20).wait()
    opted_out = rig.submit([50, 2, 3], max_tokens=20, cache_prompt=False)
    assert opted_out.wait().timings.draft_rounds == 0 and opted_out.token_ids == list(range(4, 24))
    assert rig.engine.stats.traffic_draft_tokens == 0
