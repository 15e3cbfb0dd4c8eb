"""The fleet's idle policy with stand-in hosts: a model sleeps (or unloads at its ttl)
once idle long enough (Fleet.expire_idle), and the least recently used idle model makes
room for another (Fleet._make_room), where idle counts from its last request or from the
end of its load, whichever came later."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlxcel.config import ServerConfig
from mlxcel.fleet.config_file import load_fleet_config
from mlxcel.fleet.errors import ModelLoadDeferred
from mlxcel.fleet.footprint import Footprint
from mlxcel.fleet.residency import Fleet, Resident
from mlxcel.http.errors import as_api_error
from mlxcel.turn.model_host import HostState


class Host:
    """What expire_idle reads of a ModelHost: its state, its engine, and close()."""

    def __init__(self) -> None:
        self.state, self.engine, self.closed = HostState.READY, None, False

    def close(self) -> None:
        self.closed = True


def _fleet(tmp_path: Path, sleep_s: int, ttl: str = "") -> Fleet:
    path = tmp_path / "mlxcel.yaml"
    path.write_text(textwrap.dedent(f"""
        models:
          a: {{path: smollm2-135m-instruct{ttl}}}
          b: {{path: smollm2-135m-instruct}}
          c: {{path: smollm2-135m-instruct}}
        server:
          max_models: 2
    """))
    return Fleet(load_fleet_config(path), ServerConfig(model="a", sleep_idle_seconds=sleep_s), budget_bytes=1 << 40)


def _resident(fleet: Fleet, last_used: float, loaded_at: float, name: str = "a") -> Resident:
    entry = fleet.entry(name)
    resident = Resident(entry, Host(), Footprint(None, 0, 0, 0, 0), loaded_at=loaded_at, last_used=last_used)
    fleet.residents[entry.id] = resident
    return resident


def test_idle_counts_from_the_end_of_a_slow_load(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, sleep_s=5)
    # asked for at 100, loaded at 108 (slower than the 5 s idle time): awake until 113
    resident = _resident(fleet, last_used=100.0, loaded_at=108.0)
    fleet.expire_idle(now=112.9)
    assert "a" in fleet.residents and not resident.host.closed
    fleet.expire_idle(now=113.0)
    assert "a" not in fleet.residents and "a" in fleet.sleeping and resident.host.closed


def test_a_request_after_the_load_restarts_the_count_and_a_load_in_progress_never_sleeps(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, sleep_s=5)
    _resident(fleet, last_used=120.0, loaded_at=108.0)
    fleet.expire_idle(now=124.9)
    assert "a" in fleet.residents
    fleet.expire_idle(now=125.0)
    assert "a" in fleet.sleeping
    # ready by its host's state, but the fleet has not finished its load (loaded_at unset)
    loading = _resident(fleet, last_used=0.0, loaded_at=0.0)
    fleet.expire_idle(now=1000.0)
    assert fleet.residents["a"] is loading and not loading.host.closed


def test_a_ttl_counts_from_the_end_of_the_load_too(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, sleep_s=-1, ttl=", ttl_s: 30")
    resident = _resident(fleet, last_used=0.0, loaded_at=50.0)
    assert fleet.expire_idle(now=79.0) == [] and "a" in fleet.residents
    assert fleet.expire_idle(now=80.0) == ["a"] and resident.host.closed and "a" not in fleet.sleeping


def test_room_is_made_by_the_model_idle_longest_counting_from_its_load(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path, sleep_s=-1)
    # a: used at 100; b: asked for at 50 (POST /models/load), its load ended at 150, unused since
    used, loaded = _resident(fleet, 100.0, 90.0, "a"), _resident(fleet, 50.0, 150.0, "b")
    fleet._make_room(fleet.entry("c"), 0)  # at most 2 models: one goes
    assert set(fleet.residents) == {"b"} and used.retired and not loaded.retired


def test_a_model_past_the_whole_budget_is_deferred_without_a_retry(tmp_path: Path) -> None:
    """Nothing resident or busy is in the way: no wait would ever make room, so the 503
    carries no Retry-After for a client to follow forever, and nothing is unloaded."""
    fleet = _fleet(tmp_path, sleep_s=0)
    fleet.budget_bytes = 100 << 20
    idle = _resident(fleet, last_used=1.0, loaded_at=1.0, name="b")
    with pytest.raises(ModelLoadDeferred) as info:
        fleet._make_room(fleet.entry("a"), 150 << 20)
    assert "150 MiB, more than the whole 100 MiB residency budget" in info.value.message
    assert info.value.extra["retry_after"] is None and as_api_error(info.value).headers() is None
    assert fleet.residents == {"b": idle} and not idle.host.closed
    fleet._make_room(fleet.entry("a"), 60 << 20)  # within the budget: it loads
