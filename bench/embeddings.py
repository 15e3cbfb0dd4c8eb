"""Embedding throughput and latency: mlxcel against llama-server --embedding.

Both servers serve the same converted GGUF (default: all-minilm-l6-v2 as `mlxcel
pull` stores it) with the same threads and batch sizes; rounds alternate between
them. Scenarios, each on /v1/embeddings:

- `concurrent`: 512 short sentences as 64 concurrent requests of 8 → embeddings/s;
- `single`: the same 512 sentences in one request → embeddings/s;
- `latency`: p50/p95 of single-sentence requests sent one after another while the
  `concurrent` load runs;
- `parity`: the 512 vectors of both servers, lowest cosine (target >= 0.9999).

    .venv/bin/python bench/embeddings.py [--rounds 3] [--threads 2] [--ubatch 512] [--ref-parallel 4]
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
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reference import binary_path  # noqa: E402
from servers import HOST, Server, free_port, supports_flag  # noqa: E402

DEFAULT_MODEL = Path.home() / ".cache" / "mlxcel" / "models" / "all-MiniLM-L6-v2.F16.gguf"
REPO = Path(__file__).resolve().parents[1]

SUBJECTS = ["The cat", "A young engineer", "My neighbour", "The old train", "Our team", "The river", "A small bird",
            "The new phone"]
VERBS = ["quietly watches", "slowly crosses", "happily builds", "carefully repairs", "often visits", "never forgets",
         "suddenly finds", "proudly shows"]
OBJECTS = ["the bright garden.", "a broken bridge.", "the city market.", "an empty room.", "the winter sky.",
           "a long letter.", "the final exam.", "a hidden door."]


def sentences(n: int = 512) -> list[str]:
    out = [f"{s} {v} {o}" for s in SUBJECTS for v in VERBS for o in OBJECTS]
    return out[:n]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) if values else float("nan")


async def embed(client: httpx.AsyncClient, url: str, texts: list[str]) -> np.ndarray:
    r = await client.post(f"{url}/v1/embeddings", json={"input": texts, "encoding_format": "float"})
    r.raise_for_status()
    return np.array([d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])], dtype=np.float32)


async def concurrent(client: httpx.AsyncClient, url: str, texts: list[str], per_request: int = 8) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    parts = await asyncio.gather(*(embed(client, url, texts[i:i + per_request])
                                   for i in range(0, len(texts), per_request)))
    return len(texts) / (time.perf_counter() - started), np.concatenate(parts)


async def single(client: httpx.AsyncClient, url: str, texts: list[str]) -> tuple[float, np.ndarray]:
    started = time.perf_counter()
    vectors = await embed(client, url, texts)
    return len(texts) / (time.perf_counter() - started), vectors


async def latency_under_load(client: httpx.AsyncClient, url: str, texts: list[str]) -> list[float]:
    """Single-sentence latencies while two waves of the concurrent load run."""
    samples: list[float] = []
    loading = True

    async def probe() -> None:
        i = 0
        while loading:
            started = time.perf_counter()
            await embed(client, url, [texts[i % len(texts)]])
            samples.append(time.perf_counter() - started)
            i += 1

    task = asyncio.create_task(probe())
    for _ in range(2):
        await concurrent(client, url, texts)
    loading = False
    await task
    return samples


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


async def run(args: argparse.Namespace, servers: list[Server]) -> dict:
    texts = sentences()
    results: dict[str, dict[str, list[float]]] = {s.name: {"concurrent": [], "single": [], "latency": []}
                                                  for s in servers}
    vectors: dict[str, np.ndarray] = {}
    limits = httpx.Limits(max_connections=128, max_keepalive_connections=128)
    async with httpx.AsyncClient(timeout=600, limits=limits, trust_env=False) as client:
        for server in servers:  # warm-up
            await embed(client, server.url, texts[:16])
        for rnd in range(args.rounds):
            for server in servers:
                rate, vec = await concurrent(client, server.url, texts)
                results[server.name]["concurrent"].append(rate)
                vectors[server.name] = vec
                rate, _ = await single(client, server.url, texts)
                results[server.name]["single"].append(rate)
                results[server.name]["latency"] += await latency_under_load(client, server.url, texts)
                r = results[server.name]
                print(f"round {rnd + 1} {server.name}: concurrent {r['concurrent'][-1]:.1f}/s, "
                      f"single {r['single'][-1]:.1f}/s", flush=True)
    a, b = (s.name for s in servers)
    summary = {}
    for name in (a, b):
        r = results[name]
        summary[name] = {"concurrent_per_s": float(np.median(r["concurrent"])),
                         "single_per_s": float(np.median(r["single"])),
                         "latency_p50_ms": 1e3 * percentile(r["latency"], 50),
                         "latency_p95_ms": 1e3 * percentile(r["latency"], 95),
                         "latency_samples": len(r["latency"])}
    summary["ratios"] = {
        "concurrent": summary[a]["concurrent_per_s"] / summary[b]["concurrent_per_s"],
        "single": summary[a]["single_per_s"] / summary[b]["single_per_s"],
        "latency_p50": summary[a]["latency_p50_ms"] / summary[b]["latency_p50_ms"],
        "latency_p95": summary[a]["latency_p95_ms"] / summary[b]["latency_p95_ms"],
    }
    summary["parity_min_cosine"] = float(np.min(cosines(vectors[a], vectors[b])))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ubatch", type=int, default=512)
    ap.add_argument("--ref-parallel", type=int, default=4, help="llama-server -np (sequences it batches)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mlxcel-cmd", default=f"{REPO / '.venv/bin/python'} -m mlxcel serve")
    ap.add_argument("--llama-server", default=str(binary_path()))
    ap.add_argument("--log-dir", type=Path, default=REPO / "bench" / "results" / "logs")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not args.model.is_file():
        raise SystemExit(f"{args.model} is missing: run `mlxcel pull all-minilm-l6-v2`")
    sizes = ["-t", str(args.threads), "-b", str(args.ubatch), "-ub", str(args.ubatch)]
    a_port, b_port = free_port(), free_port()
    a = Server("mlxcel", [*shlex.split(args.mlxcel_cmd), "--embedding", "-m", str(args.model), *sizes,
                          "--host", HOST, "--port", str(a_port)], a_port, args.log_dir / "mlxcel-embd.log")
    ref = [args.llama_server, "--embedding", "-m", str(args.model), *sizes, "-np", str(args.ref_parallel),
           "--host", HOST, "--port", str(b_port)]
    if supports_flag(args.llama_server, "--no-webui"):
        ref.append("--no-webui")
    b = Server("llama-server", ref, b_port, args.log_dir / "llama-server-embd.log")
    try:
        for server in (a, b):
            server.start()
            server.wait_healthy()
        summary = asyncio.run(run(args, [a, b]))
    finally:
        for server in (a, b):
            server.stop()
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
