"""A state store that fails while the server runs (a SQLite file locked past the busy
timeout, a Redis that refuses its clients' password) raises StateUnavailable naming
the store and never its password, which the HTTP edge answers as 503
unavailable_error / state_store_unavailable; the store works again once the backend
does. A background job that ends while the store is down leaves the job board once it
is back, rather than reading in_progress on every other server."""

from __future__ import annotations

import sqlite3

import pytest

from mlxcel.api.responses.background import JobStatus
from mlxcel.api.responses.state import ResponsesState
from mlxcel.config import ResponsesLimits
from mlxcel.http.errors import as_api_error
from mlxcel.state import sqlite_backend
from mlxcel.state.memory_backend import MemoryBackend
from mlxcel.state.store import StateUnavailable
from mlxcel.state.url import open_state


def test_a_sqlite_file_locked_past_the_busy_timeout_is_unavailable_then_recovers(monkeypatch, tmp_path):
    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT_MS", 50)
    path = tmp_path / "state.sqlite3"
    store = sqlite_backend.SqliteBackend(path).store("s", 10, 1000, 0)
    store.put("a", {"v": 1}, 5)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's long write
    try:
        for operation in (lambda: store.put("b", 2, 1), lambda: store.get("a"), lambda: store.keys()):
            with pytest.raises(StateUnavailable) as failed:
                operation()
            assert str(path) in str(failed.value) and "locked" in str(failed.value)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.put("b", 2, 1) and store.get("a") == {"v": 1} and sorted(store.keys()) == ["a", "b"]


def test_a_redis_that_refuses_its_password_is_unavailable_then_recovers(redis_server):
    import redis

    admin = redis.Redis.from_url(redis_server.url)
    backend = open_state(f"{redis_server.url}/5", namespace="refusing")
    store = backend.store("s", 10, 1000, 0)
    store.put("a", {"v": 1}, 5)
    admin.config_set("requirepass", "hunter2")
    admin.client_kill_filter(_type="normal", skipme=True)  # the server's connections must log in again
    try:
        for operation in (lambda: store.put("b", 2, 1), lambda: store.get("a"), lambda: store.bytes):
            with pytest.raises(StateUnavailable) as failed:
                operation()
            assert f"127.0.0.1:{redis_server.port}" in str(failed.value) and "hunter2" not in str(failed.value)
    finally:
        admin.config_set("requirepass", "")
        admin.close()
    assert store.put("b", 2, 1) and store.get("a") == {"v": 1} and store.bytes == 6
    backend.close()


def test_an_unavailable_store_is_a_503_in_the_error_format():
    error = as_api_error(StateUnavailable("the state store (redis redis://127.0.0.1:1/0) failed: ConnectionError"))
    assert error.status == 503 and error.headers() == {"Retry-After": "1"}
    assert error.body() == {"error": {"message": "the state store (redis redis://127.0.0.1:1/0) failed: "
                                                 "ConnectionError", "type": "unavailable_error",
                                      "code": "state_store_unavailable"}}


def test_a_job_that_ends_while_the_store_is_down_leaves_the_board_once_it_is_back(monkeypatch):
    backend = MemoryBackend()
    running = ResponsesState(ResponsesLimits(), prompt_cache=True, backend=backend)
    other = ResponsesState(ResponsesLimits(), prompt_cache=True, backend=backend)
    running.board.lease.renew()
    job = running.jobs.admit("resp_1", 10, {"id": "resp_1", "status": "queued"}, owner=None)
    job.move(JobStatus.IN_PROGRESS)
    running.board.settled()

    def down(*args):
        raise StateUnavailable("the state store (memory) failed")

    monkeypatch.setattr(running.board._jobs, "pop", down)
    job.move(JobStatus.COMPLETED, {"id": "resp_1", "status": "completed", "output": []})
    running.board.settled()
    assert other.job("resp_1", None).status is JobStatus.IN_PROGRESS  # what the store still holds
    with pytest.raises(StateUnavailable):
        running.board.flush()
    monkeypatch.undo()
    running.board.flush()
    assert other.job("resp_1", None) is None and not running.board.unwritten


def test_a_jobs_records_are_written_off_the_calling_thread_in_order(monkeypatch):
    """A store that stops answering must not hold the event loop, where jobs move: each
    change is written by the board's own writer, in the order of the changes."""
    import threading

    backend = MemoryBackend()
    running = ResponsesState(ResponsesLimits(), prompt_cache=True, backend=backend)
    other = ResponsesState(ResponsesLimits(), prompt_cache=True, backend=backend)
    running.board.lease.renew()
    gate, writes = threading.Event(), []
    put = running.board._jobs.put

    def stalled_put(key, value, size):
        writes.append((threading.current_thread().name, value["status"]))
        gate.wait(5)  # the store does not answer until the gate opens
        return put(key, value, size)

    monkeypatch.setattr(running.board._jobs, "put", stalled_put)
    job = running.jobs.admit("resp_2", 10, {"id": "resp_2", "status": "queued"}, owner=None)
    written = running.jobs.announce(job)
    job.move(JobStatus.IN_PROGRESS)  # returns at once, the store still stalled
    assert not written.done()
    gate.set()
    written.result(5)
    running.board.settled()
    assert [status for _, status in writes] == ["queued", "in_progress"]
    assert all(name.startswith("mlxcel-job-board") for name, _ in writes)
    assert other.job("resp_2", None).status is JobStatus.IN_PROGRESS
