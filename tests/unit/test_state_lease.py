"""--state-url parsing (refused schemes, the default file, no password in what is
printed) and server leases (a process known dead on this machine is dead at once)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlxcel.state.instances import InstanceLease, pid_alive
from mlxcel.state.memory_backend import MemoryBackend
from mlxcel.state.url import StateUnavailable, StateUrlError, open_state, parse_state_url


def test_the_default_is_a_sqlite_file_under_mlxcel_home(monkeypatch, tmp_path):
    monkeypatch.setenv("MLXCEL_HOME", str(tmp_path))
    assert parse_state_url(None).path == tmp_path / "state" / "mlxcel.sqlite3"
    assert parse_state_url("sqlite:///data/s.sqlite3").path == Path("/data/s.sqlite3")
    assert str(parse_state_url("sqlite:////data/s.sqlite3").path) == "/data/s.sqlite3"
    backend = open_state(None)
    assert backend.description == f"sqlite {tmp_path / 'state' / 'mlxcel.sqlite3'}"
    backend.close()


@pytest.mark.parametrize("url", ["mongodb://h/db", "memory://", "sqlite://relative/path", "s.sqlite3"])
def test_unknown_schemes_and_relative_paths_are_refused(url):
    with pytest.raises(StateUrlError):
        parse_state_url(url)


def test_a_redis_password_is_never_shown():
    location = parse_state_url("redis://user:s3cret@cache.local:6380/2")
    assert location.redacted == "redis://user:***@cache.local:6380/2"
    assert parse_state_url("redis://127.0.0.1:6379/0").redacted == "redis://127.0.0.1:6379/0"
    # redis-py's from_url also takes the password as a query parameter
    assert (parse_state_url("redis://cache.local:6379/0?password=s3cret&socket_timeout=5").redacted
            == "redis://cache.local:6379/0?password=***&socket_timeout=5")
    with pytest.raises(StateUnavailable) as exc:
        open_state("redis://:s3cret@127.0.0.1:1/0")
    assert "127.0.0.1:1" in str(exc.value) and "s3cret" not in str(exc.value)
    with pytest.raises(StateUnavailable) as exc:
        open_state("redis://127.0.0.1:1/0?password=s3cret")
    assert "127.0.0.1:1" in str(exc.value) and "s3cret" not in str(exc.value)


def test_a_redis_password_beside_an_ipv6_host_is_not_shown():
    assert parse_state_url("redis://:s3cret@[::1]:6380/1").redacted == "redis://:***@[::1]:6380/1"
    assert parse_state_url("redis://:s3cret@cache.local/1?PASSWORD=x").redacted == \
        "redis://:***@cache.local/1?PASSWORD=***"


@pytest.mark.parametrize("url", ["redis://h:port/0", "redis://:pw@h:99999/0", "rediss://h:6379/zero"])
def test_a_redis_url_with_a_bad_port_or_database_is_refused(url):
    with pytest.raises(StateUrlError):
        parse_state_url(url)


def test_pid_alive_sees_reaped_and_zombie_children_as_gone():
    assert pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert not pid_alive(child.pid)
    child.wait()
    assert not pid_alive(child.pid)


def test_a_lease_on_this_machine_ends_with_its_process():
    backend = MemoryBackend()
    mine, other = InstanceLease(backend), InstanceLease(backend)
    other.renew()
    assert mine.alive(mine.id) and mine.alive(other.id) and not mine.alive("unknown")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    other._store.put(other.id, {"pid": child.pid, "machine": other.machine}, 1)
    assert not mine.alive(other.id)  # its lease has not run out, but its process is gone
    other._store.put(other.id, {"pid": child.pid, "machine": "another host"}, 1)
    assert mine.alive(other.id)  # elsewhere only the lease tells


def test_leases_that_lapsed_while_the_store_was_away_are_not_taken_for_gone_servers(monkeypatch):
    now = [100.0]
    backend = MemoryBackend()
    ours, theirs = InstanceLease(backend, renew_secs=3, clock=lambda: now[0]), InstanceLease(backend)
    ours.renew()
    theirs.renew()

    def down(*args):
        raise StateUnavailable("the state store (memory) failed")

    monkeypatch.setattr(ours._store, "put", down)
    with pytest.raises(StateUnavailable):
        ours.renew()
    monkeypatch.undo()
    theirs._store.pop(theirs.id)  # its lease ran out while the store was away
    assert ours.alive(theirs.id)  # it may still run: not renewed yet
    ours.renew()  # the store is back
    assert ours.alive(theirs.id)
    now[0] += 6  # two periods: a running server has renewed its lease by now
    assert not ours.alive(theirs.id)
