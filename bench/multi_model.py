"""Two models served by one `mlxcel serve --config` (issue 16's benchmark): the first
request to a cold model, and decode throughput with both models busy.

    python bench/multi_model.py [--config FILE] [--a smol] [--b coder] [-k 2]
        [--tokens 128] [--threads 2] [--repeats 2] [--single MODEL]

Without --config it writes a config serving `smol` (smollm2-135m-instruct, the
default model) and `coder` (qwen2.5-coder-0.5b-instruct). It starts the server with
`-t THREADS -np 2k`, every request a streaming greedy /v1/chat/completions that names
its model in `model` (ignore_eos, cache_prompt off), and reports:

(a) cold vs warm: for each model, the first request's time to first token (the model
    loads on it: load + TTFT; a model the server loaded at start shows only its TTFT),
    then the same request's TTFT once the model is resident.
(b) throughput: the aggregate decode rate (tokens/s, counted between the moment every
    stream of a phase has its first token and the moment the first one finishes) of
    k streams on A alone, 2k streams on A alone, k streams on B alone, and k streams
    on each model at once. Ratios: both / A alone (k streams), both / A alone (2k
    streams: the same number of streams as "both"), and "machine" = A's both-busy
    rate over its k-stream alone rate plus B's likewise (the share of the machine
    that did useful work, the figure that means something when A and B differ in
    speed; 1.0 = nothing lost to sharing).

--single MODEL starts `mlxcel serve -m MODEL` instead and uses it as both A and B
(a check of this script before --config exists; (a) then shows the first request
after the load at start).
--repo serves another checkout's mlxcel. The server's log goes to
bench/results/logs/multi_model.log.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from servers import HOST, Server, free_port

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = """\
models:
  smol:
    path: smollm2-135m-instruct
  coder:
    path: qwen2.5-coder-0.5b-instruct
server:
  defaults:
    model: smol
"""
PROMPTS = ["Write a long story about a lighthouse keeper.", "Explain how rivers shape valleys, in detail.",
           "List many facts about the planets of the solar system.", "Describe a walk through an old city.",
           "Write a long essay about the history of bread.", "Tell a story about a robot learning to paint."]


@dataclass
class Stream:
    sent: float
    times: list[float] = field(default_factory=list)  # one per content chunk (a token)
    done: float = 0.0
    completion_tokens: int | None = None

    @property
    def ttft(self) -> float:
        return self.times[0] - self.sent


async def chat(client: httpx.AsyncClient, model: str, prompt: str, tokens: int) -> Stream:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": tokens,
            "temperature": 0, "ignore_eos": True, "cache_prompt": False, "stream": True,
            "stream_options": {"include_usage": True}}
    stream = Stream(sent=time.perf_counter())
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")[:500]
            raise RuntimeError(f"model {model}: HTTP {response.status_code}: {text}")
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue  # separators and keepalive comments
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            if "error" in chunk:
                raise RuntimeError(f"model {model}: stream error {chunk['error']}")
            if chunk.get("usage"):
                stream.completion_tokens = chunk["usage"].get("completion_tokens")
            for choice in chunk.get("choices") or []:
                if (choice.get("delta") or {}).get("content"):
                    stream.times.append(time.perf_counter())
    stream.done = time.perf_counter()
    if not stream.times:
        raise RuntimeError(f"model {model}: the stream carried no content")
    return stream


async def phase(client: httpx.AsyncClient, load: list[tuple[str, int]], tokens: int) -> list[float]:
    """Run `n` streams on each (model, n) at once; each group's decode rate (tok/s)
    over the window where every stream decodes."""
    tasks = [[asyncio.create_task(chat(client, model, PROMPTS[(i + g) % len(PROMPTS)], tokens)) for i in range(n)]
             for g, (model, n) in enumerate(load)]
    groups = [await asyncio.gather(*group) for group in tasks]
    every = [s for group in groups for s in group]
    begin = max(s.times[0] for s in every)
    end = min(s.times[-1] for s in every)
    if end <= begin:
        raise RuntimeError("no window where every stream decodes: raise --tokens")
    return [sum(1 for s in group for t in s.times if begin <= t <= end) / (end - begin) for group in groups]


async def measure(url: str, a: str, b: str, k: int, tokens: int, repeats: int) -> dict:
    limits = httpx.Limits(max_connections=4 * k + 4)
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(600, connect=10), limits=limits,
                                 trust_env=False) as client:
        cold = {}
        for model in dict.fromkeys((a, b)):  # a model's first request, then the same once warm
            first = await chat(client, model, PROMPTS[0], 8)
            warm = await chat(client, model, PROMPTS[0], 8)
            cold[model] = {"first_ttft_s": first.ttft, "warm_ttft_s": warm.ttft}
        runs: dict[str, list] = {"a_k": [], "a_2k": [], "b_k": [], "both_a": [], "both_b": []}
        for _ in range(repeats):
            runs["a_k"].append((await phase(client, [(a, k)], tokens))[0])
            runs["a_2k"].append((await phase(client, [(a, 2 * k)], tokens))[0])
            both = await phase(client, [(a, k), (b, k)], tokens)
            runs["both_a"].append(both[0])
            runs["both_b"].append(both[1])
            runs["b_k"].append((await phase(client, [(b, k)], tokens))[0])
    return {"cold": cold, "runs": runs}


def report(args, a: str, b: str, result: dict, boot_s: float) -> None:
    med = statistics.median
    runs = result["runs"]
    print(f"mlxcel serve {'-m ' + args.single if args.single else '--config ' + args.config_shown} "
          f"-t {args.threads}: A={a} B={b}, k={args.k} streams, {args.tokens} tokens each, "
          f"{args.repeats} repeats (medians)")
    print(f"  server healthy after {boot_s:.1f} s")
    for model, c in result["cold"].items():
        print(f"  {model:>8}: first request TTFT {c['first_ttft_s']:.2f} s (load + TTFT when it was cold), "
              f"warm TTFT {c['warm_ttft_s']:.3f} s")

    def line(name: str, key: str) -> None:
        print(f"  {name:26s} {med(runs[key]):7.1f} tok/s  ({', '.join(f'{x:.1f}' for x in runs[key])})")

    line(f"A alone, {args.k} streams", "a_k")
    line(f"A alone, {2 * args.k} streams", "a_2k")
    line(f"B alone, {args.k} streams", "b_k")
    line(f"both busy: A ({args.k} streams)", "both_a")
    line(f"both busy: B ({args.k} streams)", "both_b")
    both = [x + y for x, y in zip(runs["both_a"], runs["both_b"])]
    print(f"  {'both busy: total':26s} {med(both):7.1f} tok/s")
    r_k = [t / x for t, x in zip(both, runs["a_k"])]
    r_2k = [t / x for t, x in zip(both, runs["a_2k"])]
    machine = [x / ax + y / bx for x, y, ax, bx in zip(runs["both_a"], runs["both_b"], runs["a_k"], runs["b_k"])]
    print(f"  ratio both / A alone ({args.k} streams)   {med(r_k):.3f}")
    print(f"  ratio both / A alone ({2 * args.k} streams)   {med(r_2k):.3f}")
    print(f"  machine (A both/alone + B both/alone) {med(machine):.3f}  (target >= 0.9)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="a --config file (default: smol + coder, written to a temporary file)")
    ap.add_argument("--a", default="smol", help="model id A (busy alone and together)")
    ap.add_argument("--b", default="coder", help="model id B")
    ap.add_argument("-k", type=int, default=2, help="streams per model when both are busy")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--single", metavar="MODEL", help="serve `-m MODEL` instead, as both A and B")
    ap.add_argument("--repo", type=Path, default=REPO,
                    help="the checkout whose `python -m mlxcel` serves (default: this one)")
    ap.add_argument("--json", action="store_true", help="print the raw figures as one JSON line too")
    args = ap.parse_args()
    os.chdir(args.repo)  # `python -m mlxcel` serves that checkout
    port = free_port()
    common = ["-t", str(args.threads), "-np", str(2 * args.k), "-c", str(2 * args.k * 1024),
              "--host", HOST, "--port", str(port)]
    config_file = None
    if args.single:
        a = b = Path(args.single).name
        argv = [sys.executable, "-m", "mlxcel", "serve", "-m", args.single, *common]
    else:
        a, b = args.a, args.b
        if args.config is None:
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="multi_model-", delete=False) as f:
                f.write(DEFAULT_CONFIG)
            config_file = f.name
        path = args.config or config_file
        args.config_shown = args.config or "(smol + coder)"
        argv = [sys.executable, "-m", "mlxcel", "serve", "--config", path, *common]
    server = Server("mlxcel", argv, port, REPO / "bench" / "results" / "logs" / "multi_model.log")
    started = time.perf_counter()
    server.start()
    try:
        server.wait_healthy()
        boot_s = time.perf_counter() - started
        result = asyncio.run(measure(server.url, a, b, args.k, args.tokens, args.repeats))
    finally:
        server.stop()
        if config_file is not None:
            os.unlink(config_file)
    report(args, a, b, result, boot_s)
    if args.json:
        print(json.dumps({"a": a, "b": b, "k": args.k, "tokens": args.tokens, "boot_s": boot_s, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
