"""The embedding engine's batching over a fake runtime: inputs of one job and of
concurrent jobs share decodes, within the ubatch and the sequences per decode, in
priority then arrival order; every job gets its own rows back, once."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from mlxcel.engine.embedding_engine import EmbeddingEngine, EmbeddingJob
from mlxcel.engine.engine_control import QueueFullError
from mlxcel.engine.request import Priority


class FakeEmbedder:
    """Embeds an input as [first token, length, sequence index in its decode]; records
    every decode; can hold decodes until a test lets them through."""

    def __init__(self, n_ubatch: int = 16, n_seq_max: int = 4) -> None:
        self.n_ubatch = n_ubatch
        self.n_seq_max = n_seq_max
        self.decodes: list[list[list[int]]] = []
        self.violations: list[str] = []
        self.fail_on: int | None = None  # a first token whose decode raises
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def embed(self, inputs: list[list[int]]) -> list[np.ndarray]:
        self.entered.set()
        assert self.gate.wait(5), "a held decode was never let through"
        self.decodes.append([list(t) for t in inputs])
        if sum(map(len, inputs)) > self.n_ubatch or len(inputs) > self.n_seq_max:
            self.violations.append(f"decode of {len(inputs)} inputs, {sum(map(len, inputs))} tokens")
        if self.fail_on is not None and any(t[0] == self.fail_on for t in inputs):
            raise RuntimeError("decode failed")
        return [np.array([t[0], len(t), seq], dtype=np.float32) for seq, t in enumerate(inputs)]


class Collector:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.finished = threading.Event()

    def __call__(self, rows, error) -> None:
        self.calls.append((rows, error))
        self.finished.set()

    def wait(self):
        assert self.finished.wait(5)
        assert len(self.calls) == 1
        return self.calls[0]


@pytest.fixture
def rig():
    runtimes: list[tuple[EmbeddingEngine, FakeEmbedder]] = []

    def make(**kwargs) -> tuple[EmbeddingEngine, FakeEmbedder]:
        fake = FakeEmbedder(**{k: v for k, v in kwargs.items() if k != "queue_cap"})
        engine = EmbeddingEngine(fake, kwargs.get("queue_cap", 8))
        runtimes.append((engine, fake))
        return engine, fake

    yield make
    for engine, fake in runtimes:
        fake.gate.set()
        engine.stop()
        assert fake.violations == []


def job(inputs, priority=Priority.NORMAL) -> tuple[EmbeddingJob, Collector]:
    collector = Collector()
    return EmbeddingJob(inputs, collector, priority), collector


def test_the_inputs_of_one_job_share_decodes_within_the_ubatch_and_sequence_limits(rig):
    engine, fake = rig(n_ubatch=16, n_seq_max=4)
    engine.start()
    inputs = [[i + 1] * 3 for i in range(9)]  # 9 inputs of 3 tokens: 4 + 4 + 1 sequences
    j, done = job(inputs)
    engine.submit(j)
    rows, error = done.wait()
    assert error is None
    assert [row[0] for row in rows] == [i + 1 for i in range(9)]  # each input's own row, in order
    assert [len(d) for d in fake.decodes] == [4, 4, 1]
    assert engine.queue_depth == 0


def test_a_token_budget_splits_decodes_without_reordering(rig):
    engine, fake = rig(n_ubatch=10, n_seq_max=8)
    engine.start()
    j, done = job([[1] * 6, [2] * 6, [3] * 2, [4] * 2])
    engine.submit(j)
    rows, _ = done.wait()
    assert [row[1] for row in rows] == [6, 6, 2, 2]
    assert [[t[0] for t in d] for d in fake.decodes] == [[1], [2, 3, 4]]


def test_concurrent_jobs_are_decoded_together(rig):
    engine, fake = rig(n_ubatch=64, n_seq_max=16)
    fake.gate.clear()
    engine.start()
    first, first_done = job([[100, 1]])
    engine.submit(first)  # the engine sits in this decode while the others arrive
    assert fake.entered.wait(5)
    others = [job([[10 + n, 1], [20 + n, 1]]) for n in range(4)]
    for other, _ in others:
        engine.submit(other)
    fake.gate.set()
    first_done.wait()
    for n, (_, collector) in enumerate(others):
        rows, error = collector.wait()
        assert error is None and [row[0] for row in rows] == [10 + n, 20 + n]
    assert [len(d) for d in fake.decodes] == [1, 8]  # the four jobs' eight inputs in one decode


def test_priority_goes_first_then_arrival(rig):
    engine, fake = rig(n_ubatch=64, n_seq_max=1)
    fake.gate.clear()
    engine.start()
    blocker, _ = job([[1]])
    engine.submit(blocker)
    assert fake.entered.wait(5)
    order = [(Priority.LOW, 2), (Priority.NORMAL, 3), (Priority.HIGH, 4), (Priority.NORMAL, 5)]
    collectors = []
    for priority, token in order:
        j, c = job([[token]], priority)
        engine.submit(j)
        collectors.append(c)
    fake.gate.set()
    for c in collectors:
        c.wait()
    assert [d[0][0] for d in fake.decodes] == [1, 4, 3, 5, 2]


def test_past_the_queue_cap_submit_raises_and_room_comes_back(rig):
    engine, fake = rig(queue_cap=1)
    fake.gate.clear()
    engine.start()
    a, a_done = job([[1]])
    b, b_done = job([[2]])
    engine.submit(a)
    engine.submit(b)  # one runs, one waits
    with pytest.raises(QueueFullError):
        engine.submit(job([[3]])[0])
    fake.gate.set()
    a_done.wait(), b_done.wait()
    c, c_done = job([[3]])
    engine.submit(c)
    assert c_done.wait()[1] is None


def test_a_failed_decode_fails_its_jobs_only_and_the_engine_goes_on(rig):
    engine, fake = rig(n_ubatch=4, n_seq_max=4)
    fake.fail_on = 7
    engine.start()
    bad, bad_done = job([[7, 7, 7], [8, 8, 8]])  # two decodes: the first fails
    engine.submit(bad)
    rows, error = bad_done.wait()
    assert rows is None and "decode failed" in error
    good, good_done = job([[9]])
    engine.submit(good)
    assert good_done.wait()[1] is None
    assert [d[0][0] for d in fake.decodes] == [7, 9]  # the failed job's second input was dropped
    assert engine.queue_depth == 0 and engine.alive


def test_a_cancelled_job_is_not_decoded_and_finishes_once(rig):
    engine, fake = rig(n_ubatch=64, n_seq_max=1)
    fake.gate.clear()
    engine.start()
    blocker, _ = job([[1]])
    engine.submit(blocker)
    assert fake.entered.wait(5)
    cancelled, cancelled_done = job([[2], [3]])
    engine.submit(cancelled)
    engine.cancel(cancelled)
    fake.gate.set()
    rows, error = cancelled_done.wait()
    assert rows is None and error == "cancelled"
    assert [d[0][0] for d in fake.decodes] == [1]
    assert engine.queue_depth == 0


def test_an_input_the_runtime_cannot_take_is_refused_at_submit(rig):
    engine, _ = rig(n_ubatch=4)
    with pytest.raises(ValueError):
        engine.submit(job([[1] * 5])[0])
    with pytest.raises(ValueError):
        engine.submit(job([[]])[0])


def test_stopping_fails_the_waiting_jobs(rig):
    engine, fake = rig(n_ubatch=64, n_seq_max=1)
    fake.gate.clear()
    engine.start()
    blocker, blocker_done = job([[1]])
    engine.submit(blocker)
    assert fake.entered.wait(5)
    waiting, waiting_done = job([[2]])
    engine.submit(waiting)
    stopper = threading.Thread(target=engine.stop)
    stopper.start()
    fake.gate.set()
    stopper.join(5)
    assert blocker_done.wait()[1] is None
    assert waiting_done.wait() == (None, "the server is shutting down")


def _long_then_short(rig) -> tuple[FakeEmbedder, Collector, Collector]:
    """A 12-input job, then a 1-input one, both queued behind a decode in progress."""
    engine, fake = rig(n_ubatch=64, n_seq_max=4)
    fake.gate.clear()
    engine.start()
    blocker, _ = job([[1]])
    engine.submit(blocker)
    assert fake.entered.wait(5)
    long_job, long_done = job([[10 + i] for i in range(12)])
    short_job, short_done = job([[99]])
    engine.submit(long_job)
    engine.submit(short_job)
    fake.gate.set()
    return fake, long_done, short_done


def test_a_short_job_goes_before_a_long_one_that_arrived_earlier(rig):
    fake, long_done, short_done = _long_then_short(rig)
    assert short_done.wait()[1] is None and long_done.wait()[1] is None
    assert [t[0] for t in fake.decodes[1]] == [99, 10, 11, 12]  # the one-input job first, the rest filled


def test_a_job_that_waited_long_enough_goes_by_arrival(rig, monkeypatch):
    from mlxcel.engine import embedding_engine

    monkeypatch.setattr(embedding_engine, "AGING_S", 0.0)
    fake, long_done, short_done = _long_then_short(rig)
    short_done.wait(), long_done.wait()
    assert [t[0] for t in fake.decodes[1]] == [10, 11, 12, 13]


def test_decodes_stay_short_while_interactive_requests_arrive(rig):
    """Bulk jobs alone fill the ubatch; once a one-input job has come, decodes hold at
    most the step's tokens, so the next query waits for a short decode, not a long one."""
    engine, fake = rig(n_ubatch=64, n_seq_max=64)
    engine.step_tokens = 8
    engine.start()
    bulk, bulk_done = job([[i + 1] * 4 for i in range(8)])  # 32 tokens: one decode when alone
    engine.submit(bulk)
    bulk_done.wait()
    assert [len(d) for d in fake.decodes] == [8]
    query, query_done = job([[99] * 4])
    engine.submit(query)
    query_done.wait()
    fake.decodes.clear()
    bulk, bulk_done = job([[i + 1] * 4 for i in range(8)])
    engine.submit(bulk)
    bulk_done.wait()
    assert [len(d) for d in fake.decodes] == [2, 2, 2, 2]  # 8 tokens per decode now
    long_input, long_done = job([[7] * 40])  # longer than the step: it still goes, alone
    engine.submit(long_input)
    assert long_done.wait()[1] is None
