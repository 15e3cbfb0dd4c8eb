"""A state store that fails while the server runs (a SQLite file locked past the busy
timeout, a Redis that refuses its clients' password) raises StateUnavailable naming
the store and never its password, which the HTTP edge answers as 503
unavailable_error / state_store_unavailable; the store works again once the backend
does."""

from __future__ import annotations

import sqlite3

import pytest

from mlxcel.http.errors import as_api_error
from mlxcel.state import sqlite_backend
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
