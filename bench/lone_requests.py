"""One client sending short requests one after another (a single user's chat UI, an
editor's completions): each request's wall time against llama-server's.

    .venv/bin/python bench/lone_requests.py [--model PATH] [--threads 2] [--requests 30] [--rounds 3]
        [--mlxcel-cmd CMD] [--json OUT]

Both servers are started with the same model and flags (`-c 8192 -np 4`) and used in
turn, one at a time, round after round. Each round sends `--requests` short prompts
(~12 tokens, each different, `cache_prompt` false, one token out) to `/completion` and
to `/v1/chat/completions`, and reports the median wall time a request took at the
client, and for `/completion` the part of it beyond the server's own `prompt_ms` (what
the server costs a request around its one decode). Before the first round each server
answers 40 such requests: the warm-up, and past the wakes after which mlxcel stops
waiting for the rest of a burst when requests come alone (engine/burst_watch.py).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import ROOT, Server, add_pair_arguments, pair_commands, start_server  # noqa: E402

WARM_UP = 40
KINDS = ("completion", "chat")


def request_for(kind: str, i: int) -> tuple[str, dict]:
    question = f"Question {i}: what is the capital of France?"
    if kind == "completion":
        return "/completion", {"prompt": question, "n_predict": 1, "cache_prompt": False}
    return "/v1/chat/completions", {"messages": [{"role": "user", "content": question}], "max_tokens": 1,
                                    "cache_prompt": False}


def measure(client: httpx.Client, kind: str, requests: int, first: int) -> dict[str, float]:
    walls, beyond = [], []
    for i in range(first, first + requests):
        path, body = request_for(kind, i)
        started = time.perf_counter()
        response = client.post(path, json=body)
        wall = (time.perf_counter() - started) * 1e3
        response.raise_for_status()
        walls.append(wall)
        timings = response.json().get("timings")
        if timings:
            beyond.append(wall - timings["prompt_ms"] - timings.get("predicted_ms", 0.0))
    out = {"wall_ms": statistics.median(walls)}
    if beyond:
        out["beyond_decode_ms"] = statistics.median(beyond)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pair_arguments(ap, str(ROOT / ".venv/bin/mlxcel") + " serve")
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    common = ["-m", str(args.model), "-c", "8192", "-np", "4", "-t", str(args.threads)]
    commands = pair_commands(args.mlxcel_cmd, common)
    samples: dict[str, dict[str, list[dict]]] = {name: {kind: [] for kind in KINDS} for name in commands}
    servers: dict[str, Server] = {}
    clients: dict[str, httpx.Client] = {}
    try:
        for name, command in commands.items():
            servers[name] = start_server(name, command, args.log_dir)
            clients[name] = httpx.Client(base_url=servers[name].url, timeout=120, trust_env=False)
            measure(clients[name], "completion", WARM_UP, 10_000)
        for rnd in range(args.rounds):
            for kind in KINDS:
                for name, client in clients.items():  # one at a time: the other is idle
                    sample = measure(client, kind, args.requests, rnd * args.requests)
                    samples[name][kind].append(sample)
                    print(f"round {rnd + 1} {name} {kind}: " + ", ".join(f"{k} {v:.2f}" for k, v in sample.items()),
                          file=sys.stderr, flush=True)
    finally:
        for client in clients.values():
            client.close()
        for server in servers.values():
            server.stop()
    print(f"\nShort requests one after another: {args.model.name}, -t {args.threads}, {args.requests} a round, "
          f"{args.rounds} rounds; medians of the rounds' medians, ratio mlxcel / llama-server per round")
    summary: dict[str, dict] = {}
    for kind in KINDS:
        for key in samples["mlxcel"][kind][0]:
            if not all(key in s for name in commands for s in samples[name][kind]):
                continue
            mine = [s[key] for s in samples["mlxcel"][kind]]
            ref = [s[key] for s in samples["llama-server"][kind]]
            ratio = statistics.median(a / b for a, b in zip(mine, ref))
            summary[f"{kind} {key}"] = {"mlxcel": statistics.median(mine), "llama-server": statistics.median(ref),
                                        "ratio": ratio}
            print(f"{kind + ' ' + key:32}{statistics.median(mine):9.2f}{statistics.median(ref):9.2f}{ratio:8.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "summary": summary, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
