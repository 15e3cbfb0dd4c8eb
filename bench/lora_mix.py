"""Requests of different LoRA scales side by side, on both servers: what two concurrent
streams get when they ask for different scales (a request's `lora` list) against two
that run with the server's.

    .venv/bin/python bench/lora_mix.py [--rounds 4] [--tokens 128]

Writes a rank-4 adapter for SmolLM2-135M's q/v projections (tests/fixtures/lora_adapter.py,
whose shapes are SmolLM2's, so the model is SmolLM2), starts each server (mlxcel, then the reference llama-server) with
`--lora-scaled ADAPTER:1 -np 2 -c 4096`, and per round sends two greedy requests at
once, first both without `lora`, then one of them with `[{"id": 0, "scale": 0.5}]`.
Reports aggregate tokens/s (both streams' tokens over the pair's wall time) and the
later of the two first tokens (streamed), medians over the rounds, and mixed / same per
server. One server at a time.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
import reference
from servers import HOST, Server, free_port

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.fixtures.lora_adapter import write_lora_adapter  # noqa: E402

MODEL = Path.home() / ".cache" / "mlxcel" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
OTHER_SCALES = [{"id": 0, "scale": 0.5}]


def pair(url: str, loras: list, n_tokens: int) -> tuple[float, float]:
    """Aggregate tokens/s of streamed requests sent at once, one per entry of `loras`,
    and the later of their times to first token."""
    counts: dict[int, int] = {}
    firsts: dict[int, float] = {}
    started = time.perf_counter()

    def one(index: int) -> None:
        body = {"prompt": f"Story {index}: once upon a time", "n_predict": n_tokens, "temperature": 0,
                "ignore_eos": True, "cache_prompt": False, "stream": True}
        if loras[index] is not None:
            body["lora"] = loras[index]
        n = 0
        with httpx.stream("POST", f"{url}/completion", json=body, timeout=600, trust_env=False) as answer:
            for line in answer.iter_lines():
                if line.startswith("data: ") and json.loads(line[6:]).get("content"):
                    n += 1
                    firsts.setdefault(index, time.perf_counter() - started)
        counts[index] = n

    workers = [threading.Thread(target=one, args=(i,)) for i in range(len(loras))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts.values()) / (time.perf_counter() - started), max(firsts.values())


def measure(name: str, argv: list[str], rounds: int, n_tokens: int) -> dict:
    port = free_port()
    server = Server(name, [*argv, "--host", HOST, "--port", str(port)], port,
                    REPO / "bench" / "results" / "logs" / f"lora_{name}.log")
    server.start()
    try:
        server.wait_healthy()
        pair(server.url, [None, None], 16)  # warm-up
        same, mixed = [], []
        for _ in range(rounds):
            same.append(pair(server.url, [None, None], n_tokens))
            mixed.append(pair(server.url, [None, OTHER_SCALES], n_tokens))
        return {"same_tps": statistics.median(tps for tps, _ in same),
                "mixed_tps": statistics.median(tps for tps, _ in mixed),
                "same_ttft_s": statistics.median(ttft for _, ttft in same),
                "mixed_ttft_s": statistics.median(ttft for _, ttft in mixed), "same": same, "mixed": mixed}
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    adapter = write_lora_adapter(REPO / "bench" / "results" / "lora_adapter.gguf")
    common = ["-m", str(MODEL), "-c", "4096", "-np", "2", "-t", str(args.threads),
              "--lora-scaled", f"{adapter}:1.0"]
    commands = {"mlxcel": [str(REPO / ".venv" / "bin" / "mlxcel"), "serve", *common, "--spec-type", "none"],
                "llama-server": [str(reference.ensure_llama_server()), "--no-webui", *common]}
    report = {name: measure(name, argv, args.rounds, args.tokens) for name, argv in commands.items()}
    for name, result in report.items():
        print(f"{name}: same scales {result['same_tps']:.1f} tok/s, mixed {result['mixed_tps']:.1f}, "
              f"mixed/same {result['mixed_tps'] / result['same_tps']:.3f}; the later first token "
              f"{result['same_ttft_s']:.3f} s (same), {result['mixed_ttft_s']:.3f} s (mixed)")
    a, b = report["mlxcel"], report["llama-server"]
    print(f"mlxcel/llama-server: same {a['same_tps'] / b['same_tps']:.3f}, mixed {a['mixed_tps'] / b['mixed_tps']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
