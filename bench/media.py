"""Media benchmarks: mlxcel against llama-server, both with the same model and the same
--mmproj, one server at a time. The projector is written here (tests/projector_gguf.py,
a LLaVA-style ViT at 224 px: 256 tokens per image, random weights), large enough that
encoding costs something.

  ttft   time to the first token of a chat request with one image never seen before
         (fetch, decode, encode, prefill), then of the same request again (the cache).
  stall  a text stream is generating when an image request arrives: the longest gap
         between the stream's tokens while the image prefills, against the same with
         a text prompt of about the same token count instead of the image.

    .venv/bin/python bench/media.py [--only ttft,stall] [--rounds 3] [--mlxcel-cmd CMD]
"""
from __future__ import annotations

import argparse
import base64
import shlex
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from features import MODEL, NO_KEEPALIVE, ROOT, streamed, words  # noqa: E402
from reference import ensure_llama_server  # noqa: E402
from servers import llama_server_argv, start_server  # noqa: E402

from tests.projector_gguf import png_bytes, write_vision_projector  # noqa: E402

PROJECTOR = dict(image_size=224, patch_size=14, n_embd=384, n_head=6, n_layer=7)


def image_body(seed: int, max_tokens: int) -> dict:
    png = base64.b64encode(png_bytes(200 + seed % 50, 150 + seed % 37)).decode()
    content = [{"type": "text", "text": f"Picture {seed}: what is in it?"},
               {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}]
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0}


def ttft(url: str, rounds: int) -> dict[str, list[float]]:
    """`warm-text`: a text-only request sent twice, the second's TTFT: what a repeated
    request costs without media, for comparison with `warm`."""
    out: dict[str, list[float]] = {"cold": [], "warm": [], "warm-text": []}
    with httpx.Client(timeout=300, limits=NO_KEEPALIVE) as client:
        client.post(f"{url}/v1/chat/completions", json=image_body(999, 1))  # warm-up: first-use costs
        for r in range(rounds):
            body = image_body(r, 4)
            out["cold"].append(streamed(client, f"{url}/v1/chat/completions", body)[0])
            out["warm"].append(streamed(client, f"{url}/v1/chat/completions", body)[0])
            text = {"messages": [{"role": "user", "content": f"Read this list, then tell a story about it: "
                                  f"{words(f'w{r}', 60)}"}], "max_tokens": 4, "temperature": 0}
            streamed(client, f"{url}/v1/chat/completions", text)
            out["warm-text"].append(streamed(client, f"{url}/v1/chat/completions", text)[0])
    return out


def _gap_during(url: str, body: dict) -> float:
    """The longest gap between a text stream's tokens while `body` is answered beside it."""
    arrivals: list[float] = []
    started = threading.Event()

    def stream() -> None:
        gen = {"prompt": "Once upon a time", "n_predict": 400, "ignore_eos": True, "temperature": 0,
               "stream": True}
        with httpx.Client(timeout=300, limits=NO_KEEPALIVE) as client:
            with client.stream("POST", f"{url}/completion", json=gen) as response:
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        arrivals.append(time.perf_counter())
                        if len(arrivals) == 20:
                            started.set()

    thread = threading.Thread(target=stream)
    thread.start()
    started.wait(120)
    with httpx.Client(timeout=300, limits=NO_KEEPALIVE) as client:
        sent = time.perf_counter()
        client.post(f"{url}/v1/chat/completions", json=body).raise_for_status()
        done = time.perf_counter()
    thread.join()
    window = [t for t in arrivals if sent <= t <= done + 0.5]
    return max(b - a for a, b in zip(window, window[1:])) if len(window) > 1 else done - sent


def stall(url: str, rounds: int) -> dict[str, list[float]]:
    text = " ".join(f"word{i}" for i in range(110))  # about as many tokens as the image request
    out: dict[str, list[float]] = {"image": [], "text": []}
    with httpx.Client(timeout=300, limits=NO_KEEPALIVE) as client:
        client.post(f"{url}/v1/chat/completions", json=image_body(998, 1))
    for r in range(rounds):
        out["image"].append(_gap_during(url, image_body(100 + r, 1)))
        out["text"].append(_gap_during(url, {"messages": [{"role": "user", "content": f"{r} {text}"}],
                                             "max_tokens": 1, "temperature": 0}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="ttft,stall")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--log-dir", type=Path, default=ROOT / "bench/results/logs")
    ap.add_argument("--mlxcel-cmd", default=f"{ROOT / '.venv/bin/mlxcel'} serve")
    args = ap.parse_args()
    projector = Path(tempfile.mkdtemp()) / "bench-mmproj.gguf"
    n_image = write_vision_projector(projector, **PROJECTOR)
    ref = str(ensure_llama_server())
    common = ["-m", str(args.model), "-c", "8192", "-np", "4", "-t", str(args.threads), "--mmproj", str(projector)]
    servers = {"mlxcel": [*shlex.split(args.mlxcel_cmd), *common],
               "llama-server": llama_server_argv(ref, common)}
    med = statistics.median
    print(f"projector: {n_image} tokens per image ({PROJECTOR})")
    for scenario, fn in (("ttft", ttft), ("stall", stall)):
        if scenario not in args.only.split(","):
            continue
        results = {}
        for name, argv in servers.items():
            server = start_server(name, argv, args.log_dir)
            try:
                results[name] = fn(server.url, args.rounds)
            finally:
                server.stop()
        for key in results["mlxcel"]:
            a, b = med(results["mlxcel"][key]), med(results["llama-server"][key])
            print(f"{scenario} {key}: mlxcel {a:.3f} s  llama-server {b:.3f} s  ratio {a / b:.3f}")
        if scenario == "stall":
            for name, r in results.items():
                print(f"  {name}: longest gap with an image {med(r['image']):.3f} s, with text {med(r['text']):.3f} s,"
                      f" ratio {med(r['image']) / med(r['text']):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
