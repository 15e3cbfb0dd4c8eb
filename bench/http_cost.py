"""What the server around llama.cpp costs per generated token, in CPU, against llama-server.

    .venv/bin/python bench/http_cost.py [--model PATH] [--threads 2] [--tokens 400] [--rounds 3]
        [--mlxcel-cmd CMD] [--json OUT]

Throughput ratios on a shared 2-core host swing by several percent between runs; CPU
time does not. Both servers are started (one at a time) with the same model and flags
and used in turn, mlxcel then llama-server, round after round; for each kind of request (one stream of `--tokens` greedy
tokens, EOS ignored) this reads every thread's CPU time from /proc/PID/task before and
after and reports, per token:

- `compute`: the `--threads` busiest threads (llama.cpp's compute threads: the one
  that calls llama_decode, which also samples, and its workers);
- `server`: every other thread of the process: the HTTP side (mlxcel's event loop,
  llama-server's HTTP threads) and any helper threads.

On two cores the `server` share is taken from the compute threads' cores, so it is
what a server adds to every token beyond llama.cpp itself. Linux only.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import ROOT, Server, add_pair_arguments, pair_commands, start_server  # noqa: E402

PROMPT = "Write a long story about a lighthouse keeper and the ships she watches."
KINDS = ("completion-stream", "completion-whole", "chat-stream", "chat-whole")


def thread_cpu_s(pid: int) -> dict[str, float]:
    """Seconds each thread of `pid` has run on a CPU, by thread id (schedstat's
    nanoseconds: /proc's stat counts in 10 ms ticks, too coarse for this)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[tid] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
        except OSError:
            continue  # the thread ended
    return out


def request_for(kind: str, tokens: int) -> tuple[str, dict]:
    stream = kind.endswith("-stream")
    if kind.startswith("completion"):
        return "/completion", {"prompt": PROMPT, "n_predict": tokens, "temperature": 0, "ignore_eos": True,
                               "cache_prompt": False, "stream": stream}
    return "/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": tokens,
                                    "temperature": 0, "ignore_eos": True, "cache_prompt": False, "stream": stream}


def measure(server: Server, kind: str, tokens: int, threads: int) -> dict[str, float]:
    path, body = request_for(kind, tokens)
    pid = server.proc.pid
    with httpx.Client(base_url=server.url, timeout=600, trust_env=False) as client:
        before, started = thread_cpu_s(pid), time.monotonic()
        if body["stream"]:
            with client.stream("POST", path, json=body) as response:
                response.raise_for_status()
                for _ in response.iter_lines():
                    pass
        else:
            client.post(path, json=body).raise_for_status()
        wall, after = time.monotonic() - started, thread_cpu_s(pid)
    used = sorted((after[t] - before.get(t, 0.0) for t in after), reverse=True)
    compute, rest = sum(used[:threads]), sum(used[threads:])
    return {"compute_ms": compute / tokens * 1e3, "server_ms": rest / tokens * 1e3, "tps": tokens / wall}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pair_arguments(ap, str(ROOT / ".venv/bin/mlxcel") + " serve --spec-type none")
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    common = ["-m", str(args.model), "-c", "4096", "-np", "1", "-t", str(args.threads)]
    commands = pair_commands(args.mlxcel_cmd, common)
    samples: dict[str, dict[str, list[dict]]] = {name: {kind: [] for kind in KINDS} for name in commands}
    servers: dict[str, Server] = {}
    try:
        for name, command in commands.items():
            servers[name] = start_server(name, command, args.log_dir)
            measure(servers[name], "completion-whole", 16, args.threads)  # warm-up
        for rnd in range(args.rounds):
            for kind in KINDS:
                for name, server in servers.items():  # one at a time: the other is idle
                    sample = measure(server, kind, args.tokens, args.threads)
                    samples[name][kind].append(sample)
                    print(f"round {rnd + 1} {name} {kind}: server {sample['server_ms']:.3f} ms/token, "
                          f"compute {sample['compute_ms']:.2f} ms/token, {sample['tps']:.1f} tok/s",
                          file=sys.stderr, flush=True)
    finally:
        for server in servers.values():
            server.stop()
    print(f"\nCPU per token beside llama.cpp's compute threads: {args.model.name}, -t {args.threads}, "
          f"{args.tokens} tokens, {args.rounds} rounds, medians")
    print(f"{'request':20}{'mlxcel ms':>11}{'llama-server ms':>17}{'ratio':>8}"
          f"{'mlxcel compute ms':>19}{'llama-server compute ms':>25}{'tok/s ratio':>13}")
    summary = {}
    for kind in KINDS:
        row = {name: {key: statistics.median(s[key] for s in samples[name][kind])
                      for key in ("server_ms", "compute_ms", "tps")} for name in commands}
        summary[kind] = row
        a, b = row["mlxcel"], row["llama-server"]
        print(f"{kind:20}{a['server_ms']:11.3f}{b['server_ms']:17.3f}{a['server_ms'] / b['server_ms']:8.2f}"
              f"{a['compute_ms']:19.2f}{b['compute_ms']:25.2f}{a['tps'] / b['tps']:13.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "summary": summary, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
