"""The inter-token gap by position in a stream, mlxcel against llama-server: whether a
stream starts slower (or slows down) on one server than on the other.

    .venv/bin/python bench/gap_profile.py [--model PATH] [--streams 6] [--tokens 256]
        [--threads 2] [--mlxcel-cmd CMD] [--json OUT]

Both servers run with `-c 8192 -np 4 -t THREADS` (mlxcel with `--spec-type none`) and
take turns, one stream at a time: a short prompt, greedy, EOS ignored, `--tokens`
tokens on `/completion`. For each stream the gaps between token chunks are cut into
spans of positions (tokens 1-5, 5-20, 20-60, 60-128, 128 to the end) and the median gap
of each span is kept; the report gives each span's median over the streams and the
ratio mlxcel / llama-server (above 1: mlxcel's tokens come further apart).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client import make_client, stream_completion  # noqa: E402
from prompts import short_prompt  # noqa: E402
from servers import ROOT, Server, add_pair_arguments, pair_commands, start_server  # noqa: E402

EDGES = (1, 5, 20, 60, 128)


def spans(n_gaps: int) -> list[tuple[int, int]]:
    """The position spans [lo, hi) of a stream with `n_gaps` gaps (the last runs to its end)."""
    bounds = [e for e in EDGES if e < n_gaps] + [n_gaps]
    return list(zip(bounds, bounds[1:]))


def span_medians(chunk_times: list[float]) -> dict[str, float]:
    """Each span's median gap between these chunk arrival times, in ms, keyed "lo-hi"."""
    gaps = [b - a for a, b in zip(chunk_times, chunk_times[1:])]
    return {f"{lo}-{hi}": statistics.median(gaps[lo:hi]) * 1e3 for lo, hi in spans(len(gaps))}


async def measure(servers: dict[str, Server], streams: int, tokens: int) -> dict[str, list[dict[str, float]]]:
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in servers}
    async with make_client() as client:
        for server in servers.values():
            await stream_completion(client, server.url, short_prompt("gap-profile-warm-up"), 16)
        for i in range(streams):
            for name, server in servers.items():  # one at a time: the other is idle
                result = await stream_completion(client, server.url, short_prompt(f"gap-profile-{i}"), tokens)
                samples[name].append(span_medians(result.chunk_times))
                print(f"stream {i + 1} {name}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in samples[name][-1].items()),
                      file=sys.stderr, flush=True)
    return samples


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_pair_arguments(ap, str(ROOT / ".venv/bin/mlxcel") + " serve --spec-type none")
    ap.add_argument("--streams", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=256)
    args = ap.parse_args(argv)
    if args.tokens < 3:
        ap.error("--tokens must be at least 3")
    common = ["-m", str(args.model), "-c", "8192", "-np", "4", "-t", str(args.threads)]
    commands = pair_commands(args.mlxcel_cmd, common)
    servers: dict[str, Server] = {}
    try:
        for name, command in commands.items():
            servers[name] = start_server(name, command, args.log_dir)
        samples = asyncio.run(measure(servers, args.streams, args.tokens))
    finally:
        for server in servers.values():
            server.stop()
    print(f"\ninter-token gap by position: {args.model.name}, -c 8192 -np 4 -t {args.threads}, "
          f"{args.streams} streams of {args.tokens} tokens each, medians")
    print(f"{'tokens':>10}{'mlxcel ms':>12}{'llama-server ms':>17}{'ratio':>8}")
    summary = {}
    for key in samples["mlxcel"][0]:
        a = statistics.median(s[key] for s in samples["mlxcel"])
        b = statistics.median(s[key] for s in samples["llama-server"])
        summary[key] = {"mlxcel_ms": a, "llama_server_ms": b, "ratio": a / b}
        print(f"{key:>10}{a:12.2f}{b:17.2f}{a / b:8.3f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "summary": summary, "samples": samples}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
