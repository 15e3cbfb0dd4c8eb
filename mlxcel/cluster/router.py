"""The Ray Serve request router of the engine replicas.

`prefix` (the default): a request goes to the replica holding the longest prefix of
its prompt, as chained block digests (mlxcel.cluster.prompt_keys) checked against
what each replica reports it holds (slots and host cache, refreshed every
`request_routing_stats_period_s`) and what this router sent it since. Ties, and
requests without a prompt, go to the least loaded replica (waiting + in flight). A
replica holding the prefix is skipped when its load exceeds the least loaded one's
by more than `overload` requests (1): conversations sharing a system prompt must not
all pile up on the replica that prefilled it first while another idles; measured on
the agent bench, a bound of one replica's slot count queued 5-6 of 8 conversations
on one replica (p50 TTFT 0.71 of round robin's), a bound of 1 split them evenly and
kept 99% of turns on their replica. `round-robin` rotates, for comparison.

A request naming `replica=` (the gateway's fan-out: /health, /metrics) goes to that
replica alone."""

from __future__ import annotations

import itertools
import time
import weakref
from collections import OrderedDict

from ray.serve.request_router import PendingRequest, ReplicaID, ReplicaResult, RequestRouter, RunningReplica

SENT_TTL_S = 30.0  # how long a prompt this router sent counts as held before a report confirms it
SENT_MAX = 1 << 16
RESERVED_TTL_S = 5.0
FINISHED_EARLY_MAX = 4096  # completions seen before their request's routing callback, kept at most
LIVE: weakref.WeakSet[PrefixRouter] = weakref.WeakSet()  # routers in this process (the gateway reads them)


def replica_key(replica: RunningReplica) -> str:
    return replica.replica_id.unique_id


class PrefixRouter(RequestRouter):
    def initialize_state(self, mode: str = "prefix", overload: int = 1) -> None:
        self.mode = mode
        self.overload = overload
        self._turn = itertools.count()  # rotation among equals, for the requests served
        self._aux_turn = itertools.count()  # and for the other calls (prompt digests), apart
        self._sent: dict[str, OrderedDict[int, float]] = {}  # replica -> digest -> when sent
        self._held_cache: dict[str, tuple[list, frozenset[int]]] = {}  # replica -> (report's list, as a set)
        self._open: dict[str, set[str]] = {}  # replica -> requests this router sent it that have not finished
        self._last_done: dict[str, float] = {}  # replica -> wall time a request of it last finished
        # requests whose completion came before their `on_request_routed`: Ray registers the
        # completion callback before it awaits the replica's acceptance, so a fast answer (a
        # 401) can finish first, and counting it open then would mark the replica busy forever
        self._finished_early: OrderedDict[str, None] = OrderedDict()
        # request -> (replica, when): chosen but not yet sent; counted as load for a while so a
        # burst routed at once spreads instead of all seeing the same idle replica
        self._reserved: dict[str, tuple[str, float]] = {}
        self.routed = {"prefix": 0, "load": 0, "round_robin": 0}  # requests served, by how they were placed
        # Ray may unpickle this class by value, with copies of this module's globals: the
        # registry the gateway reads is the imported module's
        import mlxcel.cluster.router as registry

        registry.LIVE.add(self)

    # -- what the gateway reads ------------------------------------------------------

    def replicas(self) -> dict[str, dict]:
        """Every running replica's id, node and last report (without its digests)."""
        return {replica_key(r): {**{k: v for k, v in (r.routing_stats or {}).items() if k not in ("held", "replica")},
                                 "node": r.node_id, "held_blocks": len((r.routing_stats or {}).get("held") or ())}
                for r in self.curr_replicas.values()}

    # -- routing -----------------------------------------------------------------------

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        if not candidate_replicas:
            return []
        kwargs = pending_request.kwargs if pending_request is not None else {}
        if pending_request is not None:  # every rank tried and full: back off before the next round
            pending_request.routing_context.should_backoff = True
        pinned = kwargs.get("replica")
        if pinned is not None:
            return [[r for r in candidate_replicas if replica_key(r) == pinned]]
        counted = pending_request is not None and pending_request.metadata.call_method == "serve_http"
        ready = [r for r in candidate_replicas if (r.routing_stats or {}).get("ready", True)] or candidate_replicas
        by_load = sorted(ready, key=self._load)
        turn = self._turn if counted else self._aux_turn
        if self.mode == "round-robin":
            self.routed["round_robin"] += counted
            start = next(turn) % len(ready)
            rotated = ready[start:] + ready[:start]
            return [[rotated[0]], rotated[1:]] if len(rotated) > 1 else [rotated]
        prompt = kwargs.get("prompt_digests") or []
        best = self._warmest(by_load, prompt) if prompt else None
        if best is None:
            self.routed["load"] += counted
            best = self._least_loaded(by_load, turn)
        else:
            self.routed["prefix"] += counted
        if counted:
            self._reserved[pending_request.metadata.internal_request_id] = (replica_key(best), time.monotonic())
        return self._ranks(best, by_load)

    def _warmest(self, by_load: list[RunningReplica], prompt: list[int]) -> RunningReplica | None:
        floor = self._load(by_load[0])
        bound = self.overload
        best, best_depth = None, 0
        for replica in by_load:  # least loaded first: ties keep the lighter one
            if self._load(replica) > floor + bound:
                continue
            depth = self._depth(replica, prompt)
            if depth > best_depth:
                best, best_depth = replica, depth
        return best

    def _depth(self, replica: RunningReplica, prompt: list[int]) -> int:
        held = self._held(replica)
        sent = self._sent.get(replica_key(replica), {})
        for depth in range(len(prompt), 0, -1):
            digest = prompt[depth - 1]
            if digest in held or digest in sent:
                return depth
        return 0

    def _held(self, replica: RunningReplica) -> frozenset[int]:
        """The digests of the replica's last report, as a set built once per report."""
        digests = (replica.routing_stats or {}).get("held") or []
        key = replica_key(replica)
        cached = self._held_cache.get(key)
        if cached is None or cached[0] is not digests:  # the list is kept, so `is` cannot match a new one
            cached = (digests, frozenset(digests))
            self._held_cache[key] = cached
        return cached[1]

    def _least_loaded(self, by_load: list[RunningReplica], turn: itertools.count) -> RunningReplica:
        floor = self._load(by_load[0])
        tied = [r for r in by_load if self._load(r) == floor]
        return tied[next(turn) % len(tied)]

    @staticmethod
    def _ranks(first: RunningReplica, by_load: list[RunningReplica]) -> list[list[RunningReplica]]:
        rest = [r for r in by_load if r is not first]
        return [[first], rest] if rest else [[first]]

    def _load(self, replica: RunningReplica) -> int:
        """Requests waiting on the replica plus those in flight to it: the larger of its
        last report and what this router has sent it and not seen finish (a report is
        up to a period old; Ray's own queue-length cache can be older still for a
        replica not sent anything lately). A report taken before one of the replica's
        requests finished is older than what this router knows, and is not used: it
        kept the replica looking busy after a burst, so the next burst split 5/3."""
        stats = replica.routing_stats or {}
        key, fresh = replica_key(replica), time.monotonic() - RESERVED_TTL_S
        stale = float(stats.get("at", 0.0)) < self._last_done.get(key, 0.0)
        reported = 0 if stale else int(stats.get("waiting", 0)) + int(stats.get("busy", 0))
        reserved = sum(1 for chosen, when in self._reserved.values() if chosen == key and when > fresh)
        return max(reported, len(self._open.get(key, ())) + reserved)

    # -- bookkeeping -------------------------------------------------------------------

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        open_requests = self._open.get(replica_id.unique_id, set())
        if internal_request_id in open_requests:
            open_requests.remove(internal_request_id)
        else:  # not routed yet (or not a counted call): remember it, bounded
            self._finished_early[internal_request_id] = None
            while len(self._finished_early) > FINISHED_EARLY_MAX:
                self._finished_early.popitem(last=False)
        self._last_done[replica_id.unique_id] = time.time()

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID,
                          result: ReplicaResult) -> None:
        if pending_request is not None and pending_request.metadata.call_method == "serve_http":
            request = pending_request.metadata.internal_request_id
            if request in self._finished_early:
                del self._finished_early[request]
            else:
                self._open.setdefault(replica_id.unique_id, set()).add(request)
            self._reserved.pop(request, None)
            stale = time.monotonic() - RESERVED_TTL_S  # chosen, then cancelled before it was sent
            for old in [r for r, (_, when) in self._reserved.items() if when <= stale]:
                del self._reserved[old]
        prompt = pending_request.kwargs.get("prompt_digests") if pending_request is not None else None
        if not prompt:
            return
        sent = self._sent.setdefault(replica_id.unique_id, OrderedDict())
        now = time.monotonic()
        for digest in prompt:
            sent[digest] = now
            sent.move_to_end(digest)
        while sent and (len(sent) > SENT_MAX or next(iter(sent.values())) < now - SENT_TTL_S):
            sent.popitem(last=False)
