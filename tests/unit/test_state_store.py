"""One suite for every state backend (memory, SQLite, a real Redis): the bounded
stores' LRU, byte budget, TTL and caps, entries shared by two instances of a backend
(as two server processes share them), and the Responses records and job board on
top: owner scoping, and jobs of a gone server failed with a reason."""

from __future__ import annotations

import itertools
import threading

import pytest

from mlxcel.api.responses.background import JobStatus
from mlxcel.api.responses.job_board import SERVER_GONE
from mlxcel.api.responses.records import ResponseRecord, ResponseRecords
from mlxcel.api.responses.state import ResponsesState
from mlxcel.config import ResponsesLimits
from mlxcel.state.memory_backend import MemoryBackend
from mlxcel.state.redis_backend import RedisBackend
from mlxcel.state.sqlite_backend import SqliteBackend
from mlxcel.turn.errors import TurnError

BACKENDS = ["memory", "sqlite", "redis"]
_namespaces = itertools.count()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=BACKENDS)
def open_backend(request, tmp_path):
    """A function opening another instance of one backend (same file, same Redis keys)."""
    kind = request.param
    clock = Clock()
    opened = []
    memory = MemoryBackend(clock)
    namespace = f"test{next(_namespaces)}"

    def open_one():
        if kind == "memory":
            return memory
        if kind == "sqlite":
            backend = SqliteBackend(tmp_path / "state.sqlite3", clock)
        else:
            import redis

            url = request.getfixturevalue("redis_server").url
            backend = RedisBackend(redis.Redis.from_url(url, decode_responses=True), "redis", namespace, clock)
        opened.append(backend)
        return backend

    open_one.clock = clock
    yield open_one
    for backend in opened:
        backend.close()


def test_entry_cap_evicts_the_least_recently_used(open_backend):
    store = open_backend().store("s", 3, 10_000, 0)
    for key in "abc":
        store.put(key, key.upper(), 10)
    assert store.get("a") == "A"  # a is now the most recently used
    store.put("d", "D", 10)
    assert store.keys() == ["c", "a", "d"] and "b" not in store and len(store) == 3


def test_byte_budget_evicts_in_lru_order_and_rejects_an_entry_too_big(open_backend):
    store = open_backend().store("s", 100, 30, 0)
    for key, value in (("a", 1), ("b", 2), ("c", 3)):
        store.put(key, value, 10)
    assert store.peek("a") == 1  # peek does not refresh
    store.put("d", 4, 15)
    assert store.keys() == ["c", "d"] and store.bytes == 25
    assert store.put("huge", 5, 31) is False
    assert store.keys() == ["c", "d"] and store.bytes == 25


def test_replacing_an_entry_counts_its_bytes_once_and_pop_returns_it(open_backend):
    store = open_backend().store("s", 10, 100, 0)
    store.put("a", 1, 40)
    store.put("a", {"v": [2, "é", None]}, 50)
    assert store.bytes == 50 and store.get("a") == {"v": [2, "é", None]}
    assert store.pop("a") == {"v": [2, "é", None]} and store.pop("a") is None and store.bytes == 0


def test_ttl_expires_entries_and_zero_disables_it(open_backend):
    backend = open_backend()
    clock = open_backend.clock
    store = backend.store("s", 10, 1000, 60)
    forever = backend.store("f", 10, 1000, 0)
    store.put("a", 1, 1)
    store.put("short", 2, 1, ttl_secs=5)
    forever.put("a", 1, 1)
    clock.now += 10
    assert "short" not in store and store.get("a") == 1
    clock.now += 60
    assert store.get("a") is None and len(store) == 0 and store.bytes == 0
    clock.now += 10**6
    assert forever.get("a") == 1


def test_zero_entries_disables_and_zero_bytes_evicts_at_once(open_backend):
    backend = open_backend()
    off = backend.store("off", 0, 1000, 0)
    assert not off.enabled and off.put("a", 1, 1) is False and off.get("a") is None
    evicting = backend.store("evicting", 10, 0, 0)
    assert evicting.enabled and evicting.put("a", 1, 1) is False and evicting.get("a") is None


def test_two_instances_share_entries_and_lru_order(open_backend):
    first, second = open_backend().store("s", 2, 1000, 0), open_backend().store("s", 2, 1000, 0)
    first.put("a", "A", 1)
    second.put("b", "B", 1)
    assert first.get("b") == "B" and second.get("a") == "A"  # a is the most recently used
    first.put("c", "C", 1)
    assert second.keys() == ["a", "c"] and first.bytes == second.bytes == 2


def test_concurrent_puts_from_two_instances_keep_the_budgets(open_backend):
    stores = [open_backend().store("s", 20, 500, 0) for _ in range(2)]
    errors = []

    def writer(n: int) -> None:
        try:
            for i in range(60):
                stores[n].put(f"{n}-{i}", {"i": i}, 10 + i % 7)
                stores[1 - n].get(f"{1 - n}-{i}")
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    keys = stores[0].keys()
    assert 0 < len(keys) <= 20 and stores[1].keys() == keys
    held = sum(10 + int(key.split("-")[1]) % 7 for key in keys)
    assert stores[0].bytes == stores[1].bytes == held <= 500


# -- the Responses API on each backend ------------------------------------------------

def test_records_are_scoped_by_owner_and_shared_by_servers(open_backend):
    records = ResponseRecords(ResponsesLimits(), prompt_cache=True, backend=open_backend())
    other_server = ResponseRecords(ResponsesLimits(), prompt_cache=True, backend=open_backend())
    history = [{"role": "user", "content": "hi"}]
    records.save(ResponseRecord({"id": "r1", "status": "completed", "output": []}, history, owner="a"))
    found = other_server.find("r1", "a")
    assert found.body["id"] == "r1" and found.history == history and found.owner == "a"
    assert other_server.find("r1", "b") is None and other_server.find("r1") is None
    with pytest.raises(TurnError, match="not found"):
        other_server.previous_history("r1", "b")
    assert other_server.previous_history("r1", "a") == history
    records.save_conversation("c", history, owner="a")
    assert other_server.conversation_history("c", "a") == history
    with pytest.raises(TurnError) as exc:
        other_server.conversation_history("c", "b")
    assert exc.value.code == "conversation_not_found"
    assert not other_server.drop("r1", "b") and other_server.drop("r1", "a") and records.find("r1", "a") is None


def test_a_job_is_seen_by_another_server_and_failed_once_its_server_is_gone(open_backend):
    running = ResponsesState(ResponsesLimits(), prompt_cache=True, backend=open_backend())
    other = ResponsesState(ResponsesLimits(), prompt_cache=True, backend=open_backend())
    running.board.lease.renew()
    other.board.lease.renew()
    job = running.jobs.admit("resp_1", 10, {"id": "resp_1", "status": "queued", "store": True}, owner="a")
    job.move(JobStatus.IN_PROGRESS)
    running.board.settled()  # the board's writer has it
    seen = other.job("resp_1", "a")
    assert seen.status is JobStatus.IN_PROGRESS and seen.body["status"] == "in_progress"
    assert other.job("resp_1", "b") is None
    with pytest.raises(TurnError, match="has not finished"):
        other.previous_history("resp_1", "a")
    other.fail_orphans()
    assert other.job("resp_1", "a") is not None  # its server is alive: left alone
    running.board.lease._store.pop(running.board.lease.id)  # the running server's lease ran out
    other.fail_orphans()
    assert other.job("resp_1", "a") is None
    failed = other.records.find("resp_1", "a").body
    assert failed["status"] == "failed" and failed["error"] == {"code": "server_error", "message": SERVER_GONE}


def test_a_finished_job_leaves_the_board_and_a_cancel_request_reaches_its_server(open_backend):
    running = ResponsesState(ResponsesLimits(), prompt_cache=True, backend=open_backend())
    other = ResponsesState(ResponsesLimits(), prompt_cache=True, backend=open_backend())
    job = running.jobs.admit("resp_2", 10, {"id": "resp_2", "status": "queued"}, owner=None)
    other.board.request_cancel("resp_2")
    assert running.board.cancel_requested("resp_2")
    running.records.save(ResponseRecord({"id": "resp_2", "status": "cancelled", "output": []}, []))
    job.move(JobStatus.CANCELLED, {"id": "resp_2", "status": "cancelled", "output": []})
    running.board.settled()
    assert other.job("resp_2", None) is None and not running.board.cancel_requested("resp_2")
    assert other.records.find("resp_2").body["status"] == "cancelled"


WRITER = """
import sys
from mlxcel.state.url import open_state
store = open_state(sys.argv[1], namespace=sys.argv[2]).store("s", 25, 600, 0)
for i in range(150):
    store.put(f"{sys.argv[3]}-{i}", {"i": i}, 10 + i % 7)
    store.get(f"{sys.argv[3]}-{i // 2}")
"""


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_two_processes_writing_at_once_keep_the_budgets(kind, request, tmp_path):
    import subprocess
    import sys

    from mlxcel.state.url import open_state

    url = f"sqlite://{tmp_path}/state.sqlite3" if kind == "sqlite" else request.getfixturevalue("redis_server").url
    namespace = f"procs{next(_namespaces)}"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, url, namespace, name]) for name in "ab"]
    assert [w.wait(60) for w in writers] == [0, 0]
    backend = open_state(url, namespace=namespace)
    store = backend.store("s", 25, 600, 0)
    keys = store.keys()
    held = sum(10 + int(key.split("-")[1]) % 7 for key in keys)
    assert 0 < len(keys) <= 25 and store.bytes == held <= 600
    backend.close()


TURNS = """
import pathlib, sys, time
from mlxcel.api.responses.records import ResponseRecords
from mlxcel.config import ResponsesLimits
from mlxcel.state.url import open_state
records = ResponseRecords(ResponsesLimits(), False, open_state(sys.argv[1], namespace=sys.argv[2]))
ready = pathlib.Path(sys.argv[4])
(ready / sys.argv[3]).touch()
while len(list(ready.iterdir())) < 2:  # both started: their turns interleave
    time.sleep(0.001)
for i in range(80):
    base = records.conversation_history("conv")
    records.save_conversation("conv", [*base, {"role": "user", "content": f"{sys.argv[3]}-{i}"}], None, base)
"""


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_two_servers_recording_turns_of_one_conversation_at_once_keep_every_turn(kind, request, tmp_path):
    import subprocess
    import sys

    from mlxcel.state.url import open_state

    url = f"sqlite://{tmp_path}/state.sqlite3" if kind == "sqlite" else request.getfixturevalue("redis_server").url
    namespace = f"turns{next(_namespaces)}"
    ready = tmp_path / "ready"
    ready.mkdir()
    servers = [subprocess.Popen([sys.executable, "-c", TURNS, url, namespace, name, str(ready)]) for name in "ab"]
    assert [s.wait(120) for s in servers] == [0, 0]
    backend = open_state(url, namespace=namespace)
    history = ResponseRecords(ResponsesLimits(), False, backend).conversation_history("conv")
    assert sorted(item["content"] for item in history) == sorted(f"{n}-{i}" for n in "ab" for i in range(80))
    backend.close()


def test_an_update_that_raises_or_declines_leaves_the_entry(open_backend):
    store = open_backend().store("u", 10, 1000, 0)
    store.put("k", {"n": 1}, 5)
    with pytest.raises(KeyError):
        store.update("k", lambda value: {}["missing"])
    assert not store.update("k", lambda value: None)
    assert not store.update("k", lambda value: ({"n": 2}, 5000))  # over the byte budget
    assert store.update("k", lambda value: ({"n": value["n"] + 1}, 5)) and store.peek("k") == {"n": 2}
    assert store.update("new", lambda value: ({"was": value}, 5)) and store.peek("new") == {"was": None}
