"""Replicas on Ray Serve (`mlxcel serve --replicas N`): prefix-aware routing against
round robin on agent conversations, and aggregate decode of 2 replicas against 1.

`agent`: bench/agent.py's workload (a shared ~1,500-token system prompt, streamed
multi-turn conversations, even ones on /v1/chat/completions, odd ones on
/v1/messages, greedy, EOS ignored) through the Ray endpoint, once with `--router
prefix` and once with `--router round-robin`, one server after the other. Reported
per router: time to first token over every turn (p50, p95, mean), wall time of a
round, prompt tokens served from a cache (each turn's usage), the gateway's routing
counters (GET /v1/metrics `routing`), turns per replica (`x-mlxcel-replica`) and how
many of a conversation's turns landed on its most used replica.

`decode`: `--streams` concurrent streamed /completion requests of `--n-predict`
tokens (distinct short prompts, ignore_eos, no prompt cache) on `--replicas` replicas,
on 1 replica (both through Ray, `--router prefix`), on the replicas with `--router
round-robin` and on the single-process server, all with the same `-t`: aggregate
tokens/s (all tokens / wall time), median of `--repeats`, and the requests each
replica took. Both parts print each pass's CPU shares (engines, gateway, Ray's proxy,
the rest of Ray, this client, other processes).

Each server is stopped with SIGINT (which shuts Ray down) and must leave none of the
processes it started (`ray::` workers, raylet, GCS) behind before the next one starts.

    .venv/bin/python bench/cluster.py [--only agent,decode] [--conversations 8] [--turns 10]
        [--replicas 2] [--server-args "-t 1 -np 4 -c 16384"] [--routers prefix,round-robin]
        [--repeats 3] [--json OUT]

See bench/README.md ("Replicas on Ray Serve") for the measured figures.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from agent import MODEL, NO_KEEPALIVE, _events, pct, run_staggered, system_prompt, user_turn
from prompts import short_prompt
from servers import HOST, Server, _host_busy_s, _process_cpu_s, free_port

ROOT = Path(__file__).resolve().parent.parent
ROUTERS = ("prefix", "round-robin")


@dataclass
class Turn:
    conversation: int
    turn: int
    api: str
    ttft_s: float
    total_s: float
    replica: str
    prompt_tokens: int
    cached_tokens: int


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# -- servers -------------------------------------------------------------------------

def start(name: str, argv: list[str], log_dir: Path, replicas: int) -> Server:
    """Start `argv` on a free port; with replicas, wait until /health lists them all ready."""
    port = free_port()
    server = Server(name, [*argv, "--host", HOST, "--port", str(port)], port, log_dir / f"cluster-{name}.log")
    started = time.monotonic()
    log(f"starting {name}: {' '.join(server.argv)}")
    server.start()
    try:
        server.wait_healthy(600)
        while replicas:
            body = httpx.get(server.url + "/health", timeout=30, trust_env=False).json()
            ready = [r for r, status in (body.get("replicas") or {}).items()
                     if (status.get("status") if isinstance(status, dict) else status) == 200]
            if len(ready) >= replicas:
                break
            if time.monotonic() - started > 180:
                raise TimeoutError(f"{name}: {len(ready)} of {replicas} replicas ready\n{server.log_tail()}")
            time.sleep(0.5)
    except BaseException:
        stop(server)
        raise
    log(f"{name} ready after {time.monotonic() - started:.1f} s")
    return server


def descendants(pid: int) -> dict[int, str]:
    """Every process below `pid` (Ray's GCS, raylet and `ray::` workers), by pid: command line."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
            ppid = int(text[text.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = _cmdline(child)
            todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return ""


def stop(server: Server, grace: float = 120) -> None:
    """SIGINT (the server then takes Ray down), then wait until none of the processes it
    started (Ray's `ray::` workers, raylet, GCS) is left. Other sessions' Ray processes
    on this host are not ours to count."""
    proc = server.proc
    if proc is None:
        return
    ours = descendants(proc.pid)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            log(f"{server.name} still running {grace:.0f} s after SIGINT: stopping its process group")
    server.stop()  # SIGTERM/SIGKILL to the group if it is still there
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(_cmdline(pid) == cmd for pid, cmd in ours.items()):
        time.sleep(1)
    left = {pid: cmd for pid, cmd in ours.items() if cmd and _cmdline(pid) == cmd}
    if left:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise RuntimeError(f"{server.name}: processes left 60 s after SIGINT (killed):\n"
                           + "\n".join(f"  {pid} {cmd}" for pid, cmd in left.items()))
    log(f"{server.name} stopped: none of its {len(ours)} processes left "
        f"({sum('ray::' in c for c in ours.values())} ray:: workers)")


def _group(cmd: str) -> str:
    for marker, name in (("ServeReplica:mlxcel:engine", "engine"), ("ServeReplica:mlxcel:gateway", "gateway"),
                         ("ProxyActor", "proxy")):
        if marker in cmd:
            return name
    return "ray other"


class CpuWatch:
    """CPU seconds of the server's processes over a pass, by kind (the main process: the
    whole single-process server, or Ray's driver; each engine replica, the gateway,
    Ray's HTTP proxy, the rest of Ray: GCS, raylet, controller, dashboard agents),
    this client, and everything else on the host, as shares of all cores."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.start = self._sample()

    def _sample(self) -> dict[str, float]:
        pid = self.server.proc.pid
        out: Counter = Counter()
        for child, cmd in {pid: "server", **descendants(pid)}.items():
            try:
                seconds = _process_cpu_s(child)
            except (OSError, ValueError, IndexError):
                continue
            kind = "main" if child == pid else _group(cmd)
            out[f"engine {child}" if kind == "engine" else kind] += seconds
        out["client"] = time.process_time()
        out["host"] = _host_busy_s()
        out["wall"] = time.monotonic()
        return out

    def shares(self) -> dict[str, float]:
        end = self._sample()
        delta = {k: end[k] - self.start.get(k, 0.0) for k in end}
        wall = delta.pop("wall") * (os.cpu_count() or 1)
        host = delta.pop("host")
        shares = {k: v / wall for k, v in delta.items()}
        shares["other processes"] = max(0.0, host - sum(delta.values())) / wall
        return shares


def cpu_line(shares: dict[str, float]) -> str:
    engines = sorted((v for k, v in shares.items() if k.startswith("engine")), reverse=True)
    rest = {k: v for k, v in shares.items() if not k.startswith("engine")}
    return ("engines " + "/".join(f"{v:.0%}" for v in engines) + ", "
            + ", ".join(f"{k} {v:.0%}" for k, v in rest.items()))


def routing(url: str) -> dict[str, int]:
    return httpx.get(url + "/v1/metrics", timeout=60, trust_env=False).json().get("routing") or {}


# -- agent conversations -------------------------------------------------------------

def send(client: httpx.Client, url: str, api: str, system: str, history: list[dict], max_tokens: int
         ) -> tuple[Turn, str]:
    """One streamed turn as bench/agent.py sends it; also the replica and cached tokens."""
    common = {"max_tokens": max_tokens, "stream": True, "temperature": 0, "ignore_eos": True}
    if api == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "system", "content": system}, *history],
                                              "stream_options": {"include_usage": True}, **common}
    else:
        path, body = "/v1/messages", {"system": system, "messages": history, **common}
    sent = time.perf_counter()
    first, text, usage = None, [], {}
    with client.stream("POST", url + path, json={"model": "m", **body}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{path} -> HTTP {response.status_code}: {response.read()[:300]!r}")
        replica = response.headers.get("x-mlxcel-replica", "?")
        for event in _events(response):
            if "error" in event or event.get("type") == "error":
                raise RuntimeError(f"{path} stream error: {event}")
            piece = ""
            if api == "chat":
                for choice in event.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content") or ""
                if event.get("usage"):
                    u = event["usage"]
                    usage = {"prompt": u.get("prompt_tokens", 0),
                             "cached": (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)}
            elif event.get("type") == "content_block_delta":
                piece = event["delta"].get("text", "")
            elif event.get("type") == "message_delta":
                u = event.get("usage") or {}
                cached = u.get("cache_read_input_tokens", 0)
                usage = {"prompt": u.get("input_tokens", 0) + cached, "cached": cached}
            if piece:
                first = first or time.perf_counter()
                text.append(piece)
    done = time.perf_counter()
    turn = Turn(-1, -1, api, (first or done) - sent, done - sent, replica, usage.get("prompt", 0),
                usage.get("cached", 0))
    return turn, "".join(text)


def conversation(url: str, index: int, seed: str, system: str, args, out: list[Turn], errors: list[str]) -> None:
    api = "chat" if index % 2 == 0 else "messages"
    history: list[dict] = []
    try:
        with httpx.Client(trust_env=False, timeout=900, limits=NO_KEEPALIVE) as client:
            for number in range(args.turns):
                history.append({"role": "user", "content": user_turn(seed, index, number)})
                turn, reply = send(client, url, api, system, history, args.max_tokens)
                history.append({"role": "assistant", "content": reply})
                turn.conversation, turn.turn = index, number
                out.append(turn)
    except Exception as exc:  # noqa: BLE001 - reported, the round is then invalid
        errors.append(f"conversation {index}: {exc}")


def agent_round(server: Server, seed: str, args) -> dict:
    url = server.url
    system = system_prompt(seed, args.system_words)
    before = routing(url)
    watch = CpuWatch(server)
    turns: list[Turn] = []
    errors: list[str] = []
    threads = [threading.Thread(target=conversation, args=(url, i, seed, system, args, turns, errors))
               for i in range(args.conversations)]
    wall = run_staggered(threads, args.stagger)
    cpu = watch.shares()
    after = routing(url)
    if errors:
        raise RuntimeError("; ".join(errors))
    return {"wall_s": wall, "cpu_share": cpu, "turns": [asdict(t) for t in turns],
            "routing": {k: after.get(k, 0) - before.get(k, 0) for k in after}}


def agent_summary(rounds: list[dict]) -> dict:
    turns = [t for r in rounds for t in r["turns"]]
    ttfts = [t["ttft_s"] for t in turns]
    prompt = sum(t["prompt_tokens"] for t in turns)
    cached = sum(t["cached_tokens"] for t in turns)
    sticky = []  # per conversation: share of its turns on its most used replica
    for rnd in rounds:
        for index in {t["conversation"] for t in rnd["turns"]}:
            on = Counter(t["replica"] for t in rnd["turns"] if t["conversation"] == index)
            sticky.append(max(on.values()) / sum(on.values()))
    per_replica = {}
    for replica in sorted({t["replica"] for t in turns}):
        mine = [t for t in turns if t["replica"] == replica]
        per_replica[replica] = {"turns": len(mine), "prompt_tokens": sum(t["prompt_tokens"] for t in mine),
                                "cached_tokens": sum(t["cached_tokens"] for t in mine)}
    routed = Counter()
    for r in rounds:
        routed.update(r["routing"])
    return {"p50_ttft_s": pct(ttfts, 0.5), "p95_ttft_s": pct(ttfts, 0.95), "mean_ttft_s": statistics.fmean(ttfts),
            "wall_s": statistics.median(r["wall_s"] for r in rounds), "turns": len(turns),
            "cached_share": cached / prompt if prompt else float("nan"),
            "prefilled_per_turn": (prompt - cached) / len(turns), "same_replica_share": statistics.fmean(sticky),
            "routing": dict(routed), "replicas": per_replica, "cpu_share": mean_shares([r["cpu_share"] for r in rounds])}


def mean_shares(passes: list[dict[str, float]]) -> dict[str, float]:
    """Each key's mean over the passes; engines by rank (busiest first), as pids differ between servers."""
    ranked = []
    for shares in passes:
        engines = sorted((v for k, v in shares.items() if k.startswith("engine")), reverse=True)
        ranked.append({**{f"engine {i + 1}": v for i, v in enumerate(engines)},
                       **{k: v for k, v in shares.items() if not k.startswith("engine")}})
    return {k: statistics.fmean(p.get(k, 0.0) for p in ranked) for k in ranked[0]}


def run_agent(args, command: list[str]) -> dict:
    results = {}
    for router in args.routers.split(","):
        server = start(f"agent-{router}", [*command, "--replicas", str(args.replicas), "--router", router],
                       args.log_dir, args.replicas)
        try:
            warm(server.url, 2)
            rounds = []
            for rnd in range(args.rounds):
                rounds.append(agent_round(server, f"cluster-r{rnd}", args))
                log(f"agent {router} round {rnd + 1}: wall {rounds[-1]['wall_s']:.1f} s, "
                    f"routing {rounds[-1]['routing']}\n  cpu (share of all cores): {cpu_line(rounds[-1]['cpu_share'])}")
        finally:
            stop(server)
        results[router] = {"summary": agent_summary(rounds), "rounds": rounds}
    return results


def print_agent(results: dict, args) -> None:
    print(f"\nagent conversations through Ray: {args.conversations} x {args.turns} turns, {args.replicas} replicas "
          f"({args.server_args}), max_tokens {args.max_tokens}, {args.rounds} round(s), {args.model.name}")
    print(f"{'router':13}{'p50 TTFT s':>11}{'p95 TTFT s':>11}{'mean s':>8}{'wall s':>8}{'cached':>8}"
          f"{'prefilled/turn':>15}{'same replica':>13}  routing; turns (cached share) per replica")
    for router, res in results.items():
        s = res["summary"]
        spread = ", ".join(f"{r[-6:]} {v['turns']} ({v['cached_tokens'] / max(1, v['prompt_tokens']):.0%})"
                           for r, v in s["replicas"].items())
        print(f"{router:13}{s['p50_ttft_s']:11.3f}{s['p95_ttft_s']:11.3f}{s['mean_ttft_s']:8.3f}{s['wall_s']:8.1f}"
              f"{s['cached_share']:8.0%}{s['prefilled_per_turn']:15.0f}{s['same_replica_share']:13.0%}  "
              f"{s['routing']}; {spread}")
    for router, res in results.items():
        print(f"cpu, {router} (share of all {os.cpu_count()} cores): {cpu_line(res['summary']['cpu_share'])}")
    if set(ROUTERS) <= set(results):
        a, b = results["prefix"]["summary"], results["round-robin"]["summary"]
        print(f"ratio prefix/round-robin: p50 {a['p50_ttft_s'] / b['p50_ttft_s']:.3f} (target <= 0.5)  "
              f"p95 {a['p95_ttft_s'] / b['p95_ttft_s']:.3f}  mean {a['mean_ttft_s'] / b['mean_ttft_s']:.3f}  "
              f"wall {a['wall_s'] / b['wall_s']:.3f}")


# -- aggregate decode ----------------------------------------------------------------

def complete(url: str, prompt: str, n_predict: int, out: list[dict], errors: list[str], stream: bool = True) -> None:
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0, "ignore_eos": True,
            "cache_prompt": False, "stream": stream}
    tokens, first = 0, None
    try:
        with httpx.Client(trust_env=False, timeout=600, limits=NO_KEEPALIVE) as client, \
                client.stream("POST", url + "/completion", json=body) as response:
            if response.status_code != 200:
                raise RuntimeError(f"HTTP {response.status_code}: {response.read()[:300]!r}")
            replica = response.headers.get("x-mlxcel-replica", "local")
            events = _events(response) if stream else [json.loads(response.read())]
            for event in events:
                if "error" in event:
                    raise RuntimeError(f"stream error: {event}")
                n = (len(event.get("tokens") or []) or (1 if event.get("content") else 0)) if stream \
                    else event["tokens_predicted"]
                if n and first is None:
                    first = time.perf_counter()
                tokens += n
        out.append({"replica": replica, "tokens": tokens, "first": first, "done": time.perf_counter()})
    except Exception as exc:  # noqa: BLE001 - reported, the pass is then invalid
        errors.append(str(exc))


def burst(url: str, prompts: list[str], n_predict: int, stream: bool = True) -> dict:
    out: list[dict] = []
    errors: list[str] = []
    threads = [threading.Thread(target=complete, args=(url, p, n_predict, out, errors, stream)) for p in prompts]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if errors:
        raise RuntimeError("; ".join(errors))
    tokens = sum(r["tokens"] for r in out)
    if tokens != n_predict * len(prompts):
        log(f"warning: {tokens} tokens, asked for {n_predict * len(prompts)}")
    return {"wall_s": wall, "tokens": tokens, "aggregate_tps": tokens / wall,
            "per_replica": dict(Counter(r["replica"] for r in out))}


def warm(url: str, n: int) -> None:
    burst(url, [f"Warm-up {i}: say hello." for i in range(n)], 8)


def run_decode(args, command: list[str]) -> dict:
    many = ["--replicas", str(args.replicas)]
    setups = {"single": ([], 0), "ray x1": (["--replicas", "1", "--router", "prefix"], 1),
              f"ray x{args.replicas}": ([*many, "--router", "prefix"], args.replicas)}
    if args.decode_round_robin:
        setups[f"ray x{args.replicas} rr"] = ([*many, "--router", "round-robin"], args.replicas)
    results = {}
    for name, (extra, replicas) in setups.items():
        server = start(f"decode-{name.replace(' ', '')}", [*command, *extra], args.log_dir, replicas)
        try:
            warm(server.url, max(1, replicas) * 2)
            passes = []
            for rep in range(args.repeats):
                prompts = [short_prompt(f"cluster-decode-{rep}-{i}") for i in range(args.streams)]
                watch, before = CpuWatch(server), routing(server.url) if replicas else {}
                passes.append(burst(server.url, prompts, args.n_predict, args.decode_stream))
                passes[-1]["cpu_share"] = watch.shares()
                after = routing(server.url) if replicas else {}
                passes[-1]["routing"] = {k: after[k] - before.get(k, 0) for k in after}
                log(f"decode {name} pass {rep + 1}: {passes[-1]['aggregate_tps']:.1f} tok/s, "
                    f"requests per replica {list(passes[-1]['per_replica'].values())}, routing {passes[-1]['routing']}\n  cpu: {cpu_line(passes[-1]['cpu_share'])}")
        finally:
            stop(server)
        results[name] = {"aggregate_tps": statistics.median(p["aggregate_tps"] for p in passes), "passes": passes,
                         "cpu_share": mean_shares([p["cpu_share"] for p in passes])}
    return results


def print_decode(results: dict, args) -> None:
    kind = "streamed" if args.decode_stream else "whole (stream false)"
    print(f"\naggregate decode: {args.streams} concurrent {kind} requests x {args.n_predict} tokens, {args.server_args} "
          f"per replica, median of {args.repeats}, {args.model.name}")
    print(f"{'server':10}{'tok/s':>9}  requests per replica (each pass); cpu (share of all {os.cpu_count()} cores)")
    for name, res in results.items():
        spread = "; ".join(str(sorted(p["per_replica"].values(), reverse=True)) for p in res["passes"])
        print(f"{name:10}{res['aggregate_tps']:9.1f}  {spread}; {cpu_line(res['cpu_share'])}")
    many, one, single = (results[f"ray x{args.replicas}"]["aggregate_tps"], results["ray x1"]["aggregate_tps"],
                         results["single"]["aggregate_tps"])
    print(f"ratio ray x{args.replicas} / ray x1: {many / one:.3f} (target >= 1.8)  ray x{args.replicas} / single: "
          f"{many / single:.3f}  ray x1 / single: {one / single:.3f} (the gateway's cost)")
    rr = results.get(f"ray x{args.replicas} rr")
    if rr:
        print(f"ratio ray x{args.replicas} round-robin / ray x1: {rr['aggregate_tps'] / one:.3f}")


def main() -> int:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # stop the servers on the way out
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--only", default="agent,decode")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--routers", default=",".join(ROUTERS), help="agent part: the --router values to compare")
    ap.add_argument("--server-args", default="-t 1 -np 4 -c 16384", help="for each replica and the single server")
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1, help="agent rounds per router (each its own system prompt)")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--system-words", type=int, default=650, help="about 1,500 tokens")
    ap.add_argument("--stagger", type=float, default=0.25, help="seconds between conversations' starts")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3, help="decode passes per server")
    ap.add_argument("--no-stream", dest="decode_stream", action="store_false",
                    help="decode part: whole answers instead of SSE streams (no per-token HTTP or Ray traffic)")
    ap.add_argument("--no-decode-round-robin", dest="decode_round_robin", action="store_false",
                    help="leave out the replicas with --router round-robin from the decode part")
    ap.add_argument("--mlxcel-cmd", default=str(ROOT / ".venv/bin/mlxcel") + " serve")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--log-dir", type=Path, default=ROOT / "bench/results/logs")
    args = ap.parse_args()
    command = [*args.mlxcel_cmd.split(), "-m", str(args.model), *args.server_args.split()]
    parts = args.only.split(",")
    out = {"args": {k: str(v) for k, v in vars(args).items()}}
    if "agent" in parts:
        out["agent"] = run_agent(args, command)
    if "decode" in parts:
        out["decode"] = run_decode(args, command)
    if "agent" in out:
        print_agent(out["agent"], args)
    if "decode" in out:
        print_decode(out["decode"], args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
        print(f"raw results: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
