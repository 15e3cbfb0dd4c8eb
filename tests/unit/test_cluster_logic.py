"""Pure logic of the replicated mode: the merged Prometheus exposition, the router's
choice on fake replicas, and the command-line settings."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from mlxcel.cli.cluster_args import ClusterUsageError, cluster_settings, replica_threads
from mlxcel.cluster.metrics_merge import merge_exposition
from mlxcel.cluster.prompt_keys import digests


def test_merge_labels_every_sample_and_keeps_families_whole():
    a = ("# HELP x_total things\n# TYPE x_total counter\nx_total 1.0\n"
         "# HELP y seconds\n# TYPE y gauge\ny{model=\"m\"} 2.0\n")
    b = a.replace("1.0", "3.0").replace("2.0", "4.0")
    merged = merge_exposition({"r1": a, "r2": b}).splitlines()
    assert merged == [
        "# HELP x_total things", "# TYPE x_total counter", 'x_total{replica="r1"} 1.0', 'x_total{replica="r2"} 3.0',
        "# HELP y seconds", "# TYPE y gauge", 'y{replica="r1",model="m"} 2.0', 'y{replica="r2",model="m"} 4.0']


def test_merge_keeps_histogram_suffixes_in_their_family():
    text = ("# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n")
    merged = merge_exposition({"a": text, "b": text}).splitlines()
    assert merged[0] == "# TYPE h histogram" and len(merged) == 9
    assert merged[1:5] == ['h_bucket{replica="a",le="1"} 1', 'h_bucket{replica="a",le="+Inf"} 2',
                           'h_sum{replica="a"} 3', 'h_count{replica="a"} 2']


@dataclass
class FakeReplica:
    name: str
    routing_stats: dict = field(default_factory=dict)

    @property
    def replica_id(self):
        return SimpleNamespace(unique_id=self.name)


def _router(mode="prefix"):
    from mlxcel.cluster.router import PrefixRouter

    router = PrefixRouter.__new__(PrefixRouter)  # no Ray: only the policy is exercised
    router.initialize_state(mode=mode)
    return router


def _pending(request_id="r", method="serve_http", **kwargs):
    return SimpleNamespace(kwargs=kwargs, metadata=SimpleNamespace(call_method=method,
                                                                   internal_request_id=request_id),
                           routing_context=SimpleNamespace(should_backoff=False))


def _choose(router, replicas, method="serve_http", request_id="r", **kwargs):
    ranks = asyncio.run(router.choose_replicas(replicas, _pending(request_id, method=method, **kwargs)))
    return ranks[0][0].name


def stats(held=(), waiting=0, busy=0, slots=2):
    return {"ready": True, "held": list(held), "waiting": waiting, "busy": busy, "slots": slots}


def test_prefix_goes_to_the_replica_holding_the_longest_prefix():
    prompt = digests(list(range(64)))  # 4 blocks
    a = FakeReplica("a", stats(held=prompt[:1]))
    b = FakeReplica("b", stats(held=prompt[:3], busy=1))  # one busier than a: still within the bound
    assert _choose(_router(), [a, b], prompt_digests=prompt) == "b"


def test_an_overloaded_holder_is_passed_over():
    prompt = digests(list(range(64)))
    a = FakeReplica("a", stats())
    b = FakeReplica("b", stats(held=prompt, busy=2))  # 2 > 0 + 1
    assert _choose(_router(), [a, b], prompt_digests=prompt) == "a"


def test_no_prefix_means_least_loaded_and_sent_prompts_count_as_held():
    router = _router()
    a, b = FakeReplica("a", stats(busy=2)), FakeReplica("b", stats(busy=1))
    prompt = digests(list(range(100, 164)))
    assert _choose(router, [a, b], prompt_digests=prompt) == "b"
    router.on_request_routed(_pending(prompt_digests=prompt), SimpleNamespace(unique_id="a"), None)
    assert _choose(router, [a, b], prompt_digests=prompt) == "a"  # sent there: warm before any report
    assert router.routed == {"prefix": 1, "load": 1, "round_robin": 0}


def test_requests_in_flight_count_until_they_complete():
    router = _router()
    a, b = FakeReplica("a", stats()), FakeReplica("b", stats())
    for request in ("r1", "r2"):
        router.on_request_routed(_pending(request), SimpleNamespace(unique_id="a"), None)
    assert {_choose(router, [a, b]) for _ in range(3)} == {"b"}  # a has 2 open, reports say 0
    router.on_request_completed(SimpleNamespace(unique_id="a"), "r1")
    router.on_request_completed(SimpleNamespace(unique_id="a"), "r2")
    assert {_choose(router, [a, b]) for _ in range(4)} == {"a", "b"}


def test_pinned_and_round_robin_and_not_ready():
    a, b = FakeReplica("a", stats()), FakeReplica("b", stats())
    assert _choose(_router(), [a, b], replica="b") == "b"
    robin = _router("round-robin")
    assert [_choose(robin, [a, b]) for _ in range(4)] == ["a", "b", "a", "b"]
    # each request asks a replica for its prompt's digests first: that call must not skew the rotation
    idle = _router()
    placed = []
    for _ in range(4):
        _choose(idle, [a, b], method="prompt_digests")
        placed.append(_choose(idle, [a, b]))
    assert placed == ["a", "b", "a", "b"]
    a.routing_stats["ready"] = False
    assert {_choose(_router(), [a, b]) for _ in range(4)} == {"b"}


def _args(**given):
    base = dict(replicas=0, ray_address=None, router="prefix", min_replicas=None, max_replicas=None, ray_cpus=None,
                host=["127.0.0.1"], config_file=None, threads=None, models_dir=None, models_preset=None)
    return argparse.Namespace(**{**base, **given})


def test_cluster_settings_from_flags():
    assert cluster_settings(_args()) is None
    settings = cluster_settings(_args(replicas=2))
    assert settings.replicas == 2 and settings.router == "prefix"
    assert replica_threads(_args(replicas=2, ray_cpus=8), cluster_settings(_args(replicas=2, ray_cpus=8))) == 4
    assert replica_threads(_args(replicas=2, threads=3), settings) == 3
    assert cluster_settings(_args(ray_address="auto")).replicas == 1
    scaled = cluster_settings(_args(min_replicas=1, max_replicas=3))
    assert (scaled.replicas, scaled.max_replicas) == (1, 3)
    assert cluster_settings(_args(replicas=2, host=["127.0.0.1", "a.sock"])).replicas == 2  # the gateway's addresses
    for bad in (_args(min_replicas=1), _args(min_replicas=3, max_replicas=2), _args(replicas=2, config_file="f.yaml"),
                _args(replicas=2, models_dir="models"), _args(replicas=2, models_preset="models.ini")):
        with pytest.raises(ClusterUsageError):
            cluster_settings(bad)


def test_a_burst_chosen_before_any_is_sent_spreads():
    """Six requests sharing a prefix that `a` holds, all chosen before any is sent (or
    reported): each choice counts as load at once, so `a` takes what the bound allows."""
    prompt = digests(list(range(64)))
    router = _router()
    a, b = FakeReplica("a", stats(held=prompt)), FakeReplica("b", stats())
    placed = [_choose(router, [a, b], request_id=f"q{i}", prompt_digests=prompt) for i in range(6)]
    assert placed == ["a", "a", "b", "a", "b", "a"]
    for i, name in enumerate(placed):  # once sent, a request counts as open there, not twice
        router.on_request_routed(_pending(f"q{i}"), SimpleNamespace(unique_id=name), None)
    assert router._load(a) == 4 and router._load(b) == 2


def test_a_report_older_than_a_finish_the_router_saw_is_not_load():
    """After a burst, a replica's last report still says busy until its next one; the
    router saw its requests finish since, so the next burst must split evenly."""
    import time

    router = _router()
    taken = time.time()
    a, b = FakeReplica("a", {**stats(busy=3), "at": taken}), FakeReplica("b", {**stats(), "at": taken})
    assert router._load(a) == 3  # fresh: nothing finished since it was taken
    router.on_request_routed(_pending("r1"), SimpleNamespace(unique_id="a"), None)
    router.on_request_completed(SimpleNamespace(unique_id="a"), "r1")
    assert router._load(a) == 0
    chosen = [_choose(router, [a, b], request_id=f"q{i}") for i in range(8)]
    assert chosen.count("a") == chosen.count("b") == 4
    a.routing_stats = {**stats(busy=1), "at": time.time() + 1}  # a newer report counts again
    assert router._load(a) >= 1


def test_a_request_that_finishes_before_its_routing_callback_is_not_left_open():
    """Ray registers the completion callback before it awaits the replica's acceptance: a
    fast answer (a 401) completes first. The replica must not stay counted busy after."""
    router = _router()
    a, b = FakeReplica("a", stats()), FakeReplica("b", stats())
    router.on_request_completed(SimpleNamespace(unique_id="a"), "fast")
    router.on_request_routed(_pending("fast"), SimpleNamespace(unique_id="a"), None)
    assert router._load(a) == 0
    chosen = [_choose(router, [a, b], request_id=f"q{i}") for i in range(6)]
    assert chosen.count("a") == chosen.count("b") == 3
    for request, name in zip((f"q{i}" for i in range(6)), chosen):  # the usual order: routed, then done
        router.on_request_routed(_pending(request), SimpleNamespace(unique_id=name), None)
    assert router._load(a) == router._load(b) == 3
    for request, name in zip((f"q{i}" for i in range(6)), chosen):
        router.on_request_completed(SimpleNamespace(unique_id=name), request)
    assert router._load(a) == router._load(b) == 0 and not router._finished_early
