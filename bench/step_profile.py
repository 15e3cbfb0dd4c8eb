"""Where one busy engine step's time goes: 4 streams decoding while one long prompt
prefills (issue 18's "profile before guessing").

    .venv/bin/python bench/step_profile.py [--model smollm2-135m-instruct] [--threads 2]
        [--mlxcel-cmd ".venv/bin/python -m mlxcel serve"]

Starts `mlxcel serve --metrics` (5 slots), starts 4 long streaming generations, and
once they stream measures two windows from the engine's step counters
(`mlxcel_engine_step_*_seconds_total`, `mlxcel_engine_steps_total`): 2 s of the 4
streams alone, then from sending a ~1,000-token prompt to its first token (steps that
decode 4 tokens and a prefill chunk). Prints milliseconds per step by phase, and the
share of the window's wall time each took ("other": admission, publishing, the loop
itself, and for the second window the request's trip to and from the engine). The
counters come from the engine's snapshot, published every 0.1 s, so a window's edges
are that approximate ("other" can come out slightly negative).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from pathlib import Path

import httpx

from servers import HOST, Server, free_port

REPO = Path(__file__).resolve().parent.parent
PHASES = ("schedule", "fill", "decode", "sample", "emit")


def counters(client: httpx.Client) -> dict[str, float]:
    values = {}
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("mlxcel_engine_"):
            name, value = line.split()
            values[name] = float(value)
    return values


async def stream(client: httpx.AsyncClient, body: dict, first_token: asyncio.Event | None = None) -> None:
    async with client.stream("POST", "/completion", json={**body, "stream": True}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: ") and json.loads(line[6:]).get("content") and first_token is not None:
                first_token.set()


async def profile(url: str) -> list[tuple[dict[str, float], dict[str, float], float, str]]:
    sync = httpx.Client(base_url=url, timeout=60)
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        streaming = [asyncio.Event() for _ in range(4)]
        decoders = [asyncio.create_task(stream(client, {"prompt": f"Story {i}: once upon a time", "n_predict": 600,
                                                        "ignore_eos": True, "temperature": 0}, streaming[i]))
                    for i in range(4)]
        for event in streaming:
            await event.wait()
        start = await asyncio.to_thread(counters, sync)
        decode_started = time.perf_counter()
        await asyncio.sleep(2.0)
        before = await asyncio.to_thread(counters, sync)
        decode_wall = time.perf_counter() - decode_started
        started = time.perf_counter()
        prefilled = asyncio.Event()
        long_prompt = " ".join(f"Paragraph {i} of a long document about rivers." for i in range(110))
        prefill = asyncio.create_task(stream(client, {"prompt": long_prompt, "n_predict": 1}, prefilled))
        await prefilled.wait()
        wall = time.perf_counter() - started
        after = await asyncio.to_thread(counters, sync)
        for task in decoders:
            task.cancel()
        await asyncio.gather(prefill, *decoders, return_exceptions=True)
    return [(start, before, decode_wall, "4 streams decoding"), (before, after, wall, "4 decoding + 1 prefilling")]


def report(args, before: dict, after: dict, wall: float, what: str) -> None:
    steps = after["mlxcel_engine_steps_total"] - before["mlxcel_engine_steps_total"]
    spent = {p: after[f"mlxcel_engine_step_{p}_seconds_total"] - before[f"mlxcel_engine_step_{p}_seconds_total"]
             for p in PHASES}
    print(f"{args.model}, -t {args.threads}, {what}: {steps:.0f} steps in {wall:.2f} s "
          f"({1e3 * wall / max(steps, 1):.2f} ms per step, wall)")
    for phase in PHASES:
        print(f"  {phase:9s} {1e3 * spent[phase] / max(steps, 1):7.3f} ms/step  {100 * spent[phase] / wall:5.1f} %")
    rest = wall - sum(spent.values())
    print(f"  {'other':9s} {1e3 * rest / max(steps, 1):7.3f} ms/step  {100 * rest / wall:5.1f} %")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mlxcel-cmd", default=f"{REPO / '.venv' / 'bin' / 'mlxcel'} serve")
    args = ap.parse_args()
    port = free_port()
    server = Server("mlxcel", [*shlex.split(args.mlxcel_cmd), "-m", args.model, "-c", "10240",
                               "-np", "5", "-t", str(args.threads), "--metrics", "--host", HOST, "--port", str(port)],
                    port, REPO / "bench" / "results" / "logs" / "step_profile.log")
    server.start()
    try:
        server.wait_healthy()
        windows = asyncio.run(profile(server.url))
        peak = server.peak_rss_mib()
    finally:
        server.stop()
    for before, after, wall, what in windows:
        report(args, before, after, wall, what)
    print(f"peak RSS (VmHWM) {peak:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
