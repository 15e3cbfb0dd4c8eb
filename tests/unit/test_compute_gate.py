"""The compute gate: one holder at a time, waiters served in arrival order, two busy
threads alternating turn by turn, reentrancy, and no gating below two participants."""

from __future__ import annotations

import threading
import time

import pytest

from mlxcel.engine.compute_gate import ComputeGate

pytestmark = pytest.mark.timeout(30)


def gate_with(participants: int = 2) -> ComputeGate:
    gate = ComputeGate(enabled=True)
    for _ in range(participants):
        gate.join()
    return gate


def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def test_one_holder_at_a_time():
    gate = gate_with(4)
    inside, most, lock = [0], [0], threading.Lock()

    def work():
        for _ in range(200):
            with gate.hold():
                with lock:
                    inside[0] += 1
                    most[0] = max(most[0], inside[0])
                time.sleep(0)  # let the others try to get in
                with lock:
                    inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
    assert gate.waiting() == 0 and not gate.held_by_me()


def test_waiters_are_served_in_arrival_order():
    gate = gate_with()
    order: list[int] = []
    gate.acquire()
    threads = []
    def work(i: int) -> None:
        with gate.hold():
            order.append(i)

    for i in range(5):
        t = threading.Thread(target=work, args=(i,))
        t.start()
        threads.append(t)
        wait_until(lambda n=i + 1: gate.waiting() == n)  # queued before the next one starts
    gate.release()
    for t in threads:
        t.join()
    assert order == [0, 1, 2, 3, 4]


def test_two_busy_threads_alternate_and_neither_starves():
    gate = gate_with()
    turns: list[str] = []
    both_ready = threading.Barrier(2)

    def engine(name: str):
        both_ready.wait()
        for _ in range(100):
            with gate.hold():
                turns.append(name)
                time.sleep(0.0005)  # a step's compute

    threads = [threading.Thread(target=engine, args=(n,)) for n in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert turns.count("A") == turns.count("B") == 100
    # once both are queued, every release hands over to the other: no runs of one engine
    # (only at the very start, before the second one first waits, and at the end)
    middle = "".join(turns[5:-5])
    assert "AAA" not in middle and "BBB" not in middle
    assert gate.handoffs >= 180


def test_a_thread_that_releases_and_asks_again_queues_behind_the_waiter():
    gate = gate_with()
    got: list[str] = []
    gate.acquire()
    waiter = threading.Thread(target=lambda: (gate.acquire(), got.append("B"), gate.release()))
    waiter.start()
    wait_until(lambda: gate.waiting() == 1)
    gate.release()
    gate.acquire()  # B was waiting: it goes first
    got.append("A")
    gate.release()
    waiter.join()
    assert got == ["B", "A"]


def test_reentrant_on_one_thread():
    gate = gate_with()
    with gate.hold():
        with gate.hold():  # a step's drafter decode inside the step
            assert gate.held_by_me()
        assert gate.held_by_me()
    assert not gate.held_by_me()
    other = threading.Thread(target=lambda: gate.hold().__enter__())
    other.start()
    other.join(2)
    assert not other.is_alive(), "the gate was still held after the outer block"


def test_release_by_a_thread_that_does_not_hold_it_is_an_error():
    gate = gate_with()
    with pytest.raises(RuntimeError):
        gate.release()


def test_no_gating_below_two_participants_or_when_disabled():
    disabled = ComputeGate(enabled=False)
    disabled.join()
    disabled.join()
    def enter(gate: ComputeGate, entered: threading.Event) -> None:
        with gate.hold():
            entered.set()

    for gate in (gate_with(1), disabled):
        gate.acquire()  # another thread holds it ...
        entered = threading.Event()
        t = threading.Thread(target=enter, args=(gate, entered))
        t.start()
        assert entered.wait(2), "hold() waited although the gate is not active"
        gate.release()
        t.join()


def test_a_guest_gates_beside_one_participant():
    gate = gate_with(1)
    gate.acquire()
    entered = threading.Event()

    def guest():
        with gate.hold(guest=True):  # a model's warm-up while one engine runs
            entered.set()

    t = threading.Thread(target=guest)
    t.start()
    assert not entered.wait(0.2)
    gate.release()
    assert entered.wait(2)
    t.join()


def test_undecided_gate_decides_when_the_first_engine_joins(monkeypatch):
    import mlxcel.engine.compute_gate as module

    monkeypatch.setattr(module, "gate_by_default", lambda: True)
    gate = ComputeGate(enabled=None)
    with gate.hold(guest=True):  # nobody joined: nothing to wait for
        pass
    gate.join()
    assert gate.enabled is True


def test_uncontended_hold_costs_microseconds():
    gate = gate_with()
    n = 20000
    started = time.perf_counter()
    for _ in range(n):
        with gate.hold():
            pass
    per_hold = (time.perf_counter() - started) / n
    assert per_hold < 50e-6, f"{per_hold * 1e6:.1f} µs per uncontended hold"
