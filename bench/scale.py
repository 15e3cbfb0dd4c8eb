"""Scale: many concurrent clients on many slots, mlxcel against llama-server.

    .venv/bin/python bench/scale.py [--clients 64] [--requests 160] [--n-predict 64]
        [--parallel 16] [--ctx 32768] [--threads 2] [--rounds 2] [--model PATH]
        [--mlxcel-cmd CMD] [--llama-server PATH] [--json OUT]

`--clients` clients each send streamed /completion requests (distinct short prompts,
greedy, `ignore_eos`, `cache_prompt: false`, `return_progress`) one after another
until `--requests` have been sent, so the queue stays about clients - slots deep. Both
servers are started one after the other and take the rounds in turn, never both busy:
aggregate tokens/s, TTFT p50/p99, latency p99, requests lost (an error, or fewer
tokens than asked) and requests served out of arrival order. Then one mlxcel-only
pass sends the same load with a mix of `X-Priority` high/normal/low and counts
requests admitted after a less urgent one that arrived after them had been waiting;
the same mix sent to llama-server, which has no priorities, shows the check catches
inversions. See bench/README.md.
"""
from __future__ import annotations

import argparse
import asyncio
import math
import random
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import reference
from client import StreamResult, make_client, stream_completion
from prompts import short_prompt
from report import Round, args_config, clean_rounds, summarize, table, write_json
from run import DEFAULT_MODEL, MLXCEL_BIN, REPO, ensure_model, make_servers
from scenarios import Measurement, percentile
from servers import OtherLoad, running

PRIORITIES = {"high": 0, "normal": 1, "low": 2}
PRIORITY_MIX = (("high", 0.25), ("normal", 0.5), ("low", 0.25))
TARGETS = {("scale", "aggregate_tps"): (">=", 1.0), ("scale", "p99_ttft_s"): ("<=", 1.0)}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Sample:
    """One request: when it was sent, when a slot took it, its priority, its outcome."""
    index: int
    priority: str
    result: StreamResult | None
    error: str = ""

    @property
    def admitted(self) -> float:
        r = self.result
        return r.t_admitted if r.t_admitted is not None else r.chunk_times[0]


def out_of_order(samples: list[Sample], slack: float) -> tuple[int, int]:
    """(priority inversions, arrival-order inversions) among the served requests.

    A request `a` should be admitted before `b` when it is more urgent and was sent
    before `b` was admitted, or equally urgent and sent before `b`; it counts as
    served out of order when `b` was admitted first. Times are the client's, so each
    comparison allows `slack` seconds either way (the HTTP hop, one engine step).
    """
    served = [s for s in samples if s.result is not None]
    by_priority = by_arrival = 0
    for a in served:
        for b in served:
            if not b.admitted + slack < a.admitted:
                continue
            pa, pb = PRIORITIES[a.priority], PRIORITIES[b.priority]
            if pa < pb and a.result.t_sent + slack < b.admitted:
                by_priority += 1
            elif pa == pb and a.result.t_sent + slack < b.result.t_sent:
                by_arrival += 1
    return by_priority, by_arrival


async def load(client, url: str, rnd: int, args: argparse.Namespace,
               priorities: list[str]) -> tuple[list[Sample], float]:
    """`args.clients` workers share `len(priorities)` requests; (samples, wall time)."""
    queue = list(enumerate(priorities))
    queue.reverse()
    samples: list[Sample] = []

    async def worker() -> None:
        while queue:
            i, prio = queue.pop()
            headers = {"X-Priority": prio} if prio != "normal" else None
            try:
                r = await stream_completion(client, url, short_prompt(f"scale-{rnd}-{i}"), args.n_predict,
                                            headers=headers, return_progress=True)
                lost = "" if r.n_tokens == args.n_predict else f"{r.n_tokens} of {args.n_predict} tokens"
                samples.append(Sample(i, prio, r, lost))
            except Exception as exc:  # noqa: BLE001 - a lost request is a result here
                samples.append(Sample(i, prio, None, f"{type(exc).__name__}: {exc}"[:300]))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(args.clients)))
    return sorted(samples, key=lambda s: s.index), time.perf_counter() - t0


def measure(samples: list[Sample], wall: float, slack: float, with_priority: bool) -> Measurement:
    ok = [s.result for s in samples if s.result is not None]
    ttft = [r.ttft for r in ok] or [math.nan]
    latency = [r.latency for r in ok] or [math.nan]
    by_priority, by_arrival = out_of_order(samples, slack)
    metrics = {"aggregate_tps": sum(r.n_tokens for r in ok) / wall,
               "p50_ttft_s": percentile(ttft, 50), "p99_ttft_s": percentile(ttft, 99),
               "p99_latency_s": percentile(latency, 99),
               "lost": float(sum(1 for s in samples if s.error)),
               "arrival_inversions": float(by_arrival)}
    if with_priority:
        metrics["priority_inversions"] = float(by_priority)
    raw = {"wall_s": wall,
           "requests": [{"index": s.index, "priority": s.priority, "error": s.error,
                         **({"t_sent": s.result.t_sent, "t_admitted": s.admitted, "ttft_s": s.result.ttft,
                             "latency_s": s.result.latency, "n_tokens": s.result.n_tokens}
                            if s.result else {})} for s in samples]}
    return Measurement(metrics, raw)


def priority_mix(rnd: int, n: int) -> list[str]:
    rng = random.Random(f"priority-{rnd}")
    names, weights = zip(*PRIORITY_MIX)
    return rng.choices(names, weights, k=n)


def ttft_by_priority(samples: list[Sample]) -> str:
    parts = []
    for name in PRIORITIES:
        ttft = [s.result.ttft for s in samples if s.priority == name and s.result is not None]
        if ttft:
            parts.append(f"{name} ({len(ttft)}) p50 {percentile(ttft, 50):.2f} s, p99 {percentile(ttft, 99):.2f} s")
    return "; ".join(parts)


async def benchmark(args: argparse.Namespace, a, b) -> tuple[list[Round], Measurement | None, str]:
    rounds: list[Round] = []
    normal = ["normal"] * args.requests
    async with make_client(max_connections=args.clients + 8) as client:
        for server in (a, b):
            r = await stream_completion(client, server.url, "Warm-up: say hello.", n_predict=8)
            log(f"warm-up {server.name}: {r.n_tokens} tokens in {r.latency:.2f}s")
        for rnd in range(args.rounds):
            pair = []
            for server in (a, b):
                lost = 0.0  # a request lost in a pass measured again is lost all the same
                for attempt in range(args.retries + 1):
                    watch = OtherLoad(server)
                    samples, wall = await load(client, server.url, rnd, args, normal)
                    m = measure(samples, wall, args.slack, with_priority=False)
                    m.raw["other_load"] = watch.share()
                    log(f"scale round {rnd + 1}/{args.rounds} {server.name}: "
                        + " ".join(f"{k}={v:.4g}" for k, v in m.metrics.items())
                        + f" (other load on the cores {m.raw['other_load']:.0%})")
                    for s in samples:
                        if s.error:
                            log(f"  lost request {s.index}: {s.error}")
                    lost += m.metrics["lost"]
                    if not m.raw["other_load"] > args.max_other_load:
                        break
                    if attempt < args.retries:
                        log("  the cores were busy with something else: measuring again")
                m.metrics["lost"] = lost
                pair.append(m)
            rounds.append(Round("scale", rnd, *pair))
        if args.no_priority:
            return rounds, None, ""
        mix = priority_mix(args.rounds, args.requests)
        watch = OtherLoad(a)
        samples, wall = await load(client, a.url, args.rounds, args, mix)
        prio = measure(samples, wall, args.slack, with_priority=True)
        summary = f"mlxcel: {ttft_by_priority(samples)} (other load {watch.share():.0%})"
        if args.priority_control:  # the same mix on a server without priorities: the check must see it
            watch = OtherLoad(b)
            samples, wall = await load(client, b.url, args.rounds, args, mix)
            control = measure(samples, wall, args.slack, with_priority=True)
            prio.metrics["control_priority_inversions"] = control.metrics["priority_inversions"]
            summary += (f"\n  control, llama-server (ignores X-Priority): {control.metrics['priority_inversions']:.0f} "
                        f"priority inversions; {ttft_by_priority(samples)} (other load {watch.share():.0%})")
        return rounds, prio, summary


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("--parallel", "-np", type=int, default=16)
    ap.add_argument("--ctx", "-c", type=int, default=32768)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--requests", type=int, default=160, help="requests per round")
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--slack", type=float, default=0.25,
                    help="seconds of client-side timing noise allowed when judging order")
    ap.add_argument("--max-other-load", type=float, default=0.15,
                    help="redo a pass during which other processes took more than this share of the cores")
    ap.add_argument("--retries", type=int, default=1, help="most redone passes per measurement")
    ap.add_argument("--no-priority", action="store_true", help="skip the mlxcel-only priority pass")
    ap.add_argument("--no-priority-control", dest="priority_control", action="store_false",
                    help="skip sending the priority mix to llama-server too (which ignores it: a check of the check)")
    ap.add_argument("--mlxcel-cmd", default=f"{MLXCEL_BIN} serve")
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--reference-version", default=reference.DEFAULT_VERSION)
    ap.add_argument("--startup-timeout", type=float, default=600)
    ap.add_argument("--log-dir", type=Path, default=REPO / "bench" / "results" / "logs")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if min(args.rounds, args.clients, args.requests, args.n_predict) < 1:
        ap.error("--rounds, --clients, --requests and --n-predict must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    model = ensure_model(args.model.expanduser())
    ref_bin = args.llama_server or str(reference.ensure_llama_server(args.reference_version))
    servers = make_servers(args, model, ref_bin)
    with running(servers, args.startup_timeout, log) as info:
        rounds, prio, prio_ttft = asyncio.run(benchmark(args, *servers))

    kept, left_out = clean_rounds(rounds, args.max_other_load)
    rows = summarize(kept, TARGETS)
    if left_out:
        print(f"\n{left_out} round(s) left out: other processes took over {args.max_other_load:.0%} of the cores "
              "even when measured again (all rounds are in --json)")
    print(f"\nmodel {model.name}, -c {args.ctx} -np {args.parallel} -t {args.threads}, {args.clients} clients, "
          f"{args.requests} requests of {args.n_predict} tokens per round, {args.rounds} round(s); "
          "ratio = median of per-round mlxcel/llama-server\n")
    print(table(rows))
    lost = sum(r.mlxcel.metrics["lost"] + r.reference.metrics["lost"] for r in rounds)
    print(f"\nrequests lost: mlxcel {sum(r.mlxcel.metrics['lost'] for r in rounds):.0f}, llama-server "
          f"{sum(r.reference.metrics['lost'] for r in rounds):.0f} ({'ok' if lost == 0 else 'MISS'})")
    if prio is not None:
        m = prio.metrics
        verdict = "ok" if m["priority_inversions"] == 0 and m["lost"] == 0 else "MISS"
        print(f"mlxcel with X-Priority high/normal/low ({dict(PRIORITY_MIX)}): "
              f"{m['priority_inversions']:.0f} priority inversions, {m['arrival_inversions']:.0f} arrival-order "
              f"inversions within a level, {m['lost']:.0f} lost, {m['aggregate_tps']:.1f} tok/s ({verdict}; "
              f"slack {args.slack:g} s)\n  TTFT by priority, {prio_ttft}")
    rss = ", ".join(f"{n} {i.get('peak_rss_mib') or math.nan:.0f} MiB" for n, i in info.items())
    print(f"peak RSS: {rss}")
    if args.json:
        config = args_config(args)
        extra = {"priority_pass": {"metrics": prio.metrics, "raw": prio.raw}} if prio is not None else {}
        write_json(args.json, config, info, rounds, rows, **extra)
        print(f"raw samples: {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted; servers stopped")
        sys.exit(130)
