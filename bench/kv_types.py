"""KV cache element types (-ctk/-ctv) on both servers: memory per 1,000 tokens of
context, decode speed, and how often greedy output changes (issue 18).

    .venv/bin/python bench/kv_types.py [--model PATH] [--types f16,q8_0] [--threads 2]

For each server (mlxcel, then the reference llama-server) and each type, starts the
server at `-c 4096` and at `-c 16384` (one slot, `-fa on`, which a quantized V cache
needs), prefills a ~3,000-token prompt, and reads the peak RSS; the slope between the two
sizes is the memory one 1,000 tokens of context cost. At -c 4096 it also measures
decode tokens/s (128 greedy tokens) and the greedy output of 20 short prompts
(32 tokens each), which are compared with the f16 run's. One server at a time.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

import reference
from servers import HOST, Server, free_port

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = Path.home() / ".cache" / "mlxcel" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPTS = [f"Question {i}: explain in one sentence why {topic}." for i, topic in enumerate(
    ["the sky is blue", "ice floats", "bread rises", "leaves fall", "the sea is salty", "magnets attract",
     "planes fly", "cats purr", "stars twinkle", "rust forms", "tides change", "thunder follows lightning",
     "bees dance", "coffee wakes us", "rainbows arc", "deserts are cold at night", "glass is clear",
     "rivers meander", "we yawn", "snow is white"])]
LONG = " ".join(f"Line {i} of a long report on the harbour's trade." for i in range(250))


def run_one(argv: list[str], name: str, with_outputs: bool) -> dict:
    port = free_port()
    server = Server(name, [*argv, "--host", HOST, "--port", str(port)], port,
                    REPO / "bench" / "results" / "logs" / f"kv_{name}.log")
    server.start()
    try:
        server.wait_healthy()
        with httpx.Client(base_url=server.url, timeout=600, trust_env=False) as client:
            client.post("/completion", json={"prompt": LONG, "n_predict": 1, "cache_prompt": False})
            result = {"rss_mib": server.peak_rss_mib()}
            if with_outputs:
                body = client.post("/completion", json={"prompt": "Once upon a time", "n_predict": 128,
                                                        "temperature": 0, "ignore_eos": True}).json()
                result["decode_tps"] = body["timings"]["predicted_per_second"]
                result["outputs"] = [client.post("/completion", json={"prompt": p, "n_predict": 32,
                                                                      "temperature": 0}).json()["content"]
                                     for p in PROMPTS]
        return result
    finally:
        server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--types", default="f16,q8_0")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    commands = {"mlxcel": [str(REPO / ".venv" / "bin" / "mlxcel"), "serve"],
                "llama-server": [str(reference.ensure_llama_server()), "--no-webui"]}
    report: dict = {}
    for server, command in commands.items():
        for kind in args.types.split(","):
            runs = {}
            for ctx in (4096, 16384):
                argv = [*command, "-m", str(args.model), "-c", str(ctx), "-np", "1", "-t", str(args.threads),
                        "-fa", "on", "-ctk", kind, "-ctv", kind]
                runs[ctx] = run_one(argv, f"{server}-{kind}-{ctx}", with_outputs=ctx == 4096)
            report.setdefault(server, {})[kind] = {
                "rss_mib_per_1k_ctx": (runs[16384]["rss_mib"] - runs[4096]["rss_mib"]) / 12.288,
                "rss_mib_at_4096": runs[4096]["rss_mib"],
                "decode_tps": runs[4096]["decode_tps"],
                "outputs": runs[4096]["outputs"],
            }
            print(f"{server} {kind}: {report[server][kind]['rss_mib_per_1k_ctx']:.2f} MiB per 1k context, "
                  f"decode {report[server][kind]['decode_tps']:.1f} tok/s", file=sys.stderr, flush=True)
    types = args.types.split(",")
    for server, by_type in report.items():
        base = by_type[types[0]]
        for kind in types[1:]:
            other = by_type[kind]
            differ = sum(a != b for a, b in zip(base["outputs"], other["outputs"]))
            print(f"{server}: {kind} vs {types[0]}: memory per 1k context "
                  f"{other['rss_mib_per_1k_ctx']:.2f} vs {base['rss_mib_per_1k_ctx']:.2f} MiB, decode "
                  f"{other['decode_tps'] / base['decode_tps']:.3f}x, greedy outputs differing {differ}/20")
    for kind in types:
        a, b = report["mlxcel"][kind], report["llama-server"][kind]
        same = sum(x == y for x, y in zip(a["outputs"], b["outputs"]))
        print(f"{kind}: mlxcel/llama-server decode {a['decode_tps'] / b['decode_tps']:.3f}, memory per 1k context "
              f"{a['rss_mib_per_1k_ctx']:.2f} vs {b['rss_mib_per_1k_ctx']:.2f} MiB, same greedy outputs {same}/20")
    (REPO / "bench" / "results").mkdir(exist_ok=True)
    (REPO / "bench" / "results" / "kv_types.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
