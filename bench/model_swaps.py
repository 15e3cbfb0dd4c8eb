"""Memory across model swaps: `mlxcel serve --config` with one model resident
(`max_models: 1`) and requests alternating two models, so every request unloads one
model and loads the other. After each load it reads the server's /proc smaps_rollup
and prints anonymous memory (the process's own allocations; the mapped GGUF pages are
file-backed and counted apart), so what an unload fails to give back shows as a climb.

    .venv/bin/python bench/model_swaps.py [--swaps 80] [--a smollm2-135m-instruct]
        [--b gemma-3-270m] [--env NAME=VALUE ...] [--every 8]

`--env` runs the server with extra environment, for example glibc's malloc settings
(`--env MALLOC_ARENA_MAX=2`, `--env GLIBC_TUNABLES=glibc.malloc.mmap_threshold=1048576`).
Linux only (smaps_rollup)."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
CONFIG = """server:
  port: {port}
  max_models: 1
  defaults: {{model: a, ttl_s: 0}}
models:
  a: {{path: {a}, ctx_size: 1024, parallel: 2}}
  b: {{path: {b}, ctx_size: 1024, parallel: 2}}
"""


def memory(pid: int) -> dict[str, int]:
    rows = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    return {key: int(value.split()[0]) >> 10 for key, value in (row.split(":", 1) for row in rows)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--swaps", type=int, default=80)
    parser.add_argument("--a", default="smollm2-135m-instruct")
    parser.add_argument("--b", default="gemma-3-270m")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--every", type=int, default=8, help="print one load in EVERY")
    parser.add_argument("--port", type=int, default=8997)
    args = parser.parse_args()
    env = dict(os.environ, **dict(item.split("=", 1) for item in args.env))
    folder = Path(tempfile.mkdtemp(prefix="mlxcel-swaps-"))
    config = folder / "swaps.yaml"
    config.write_text(CONFIG.format(port=args.port, a=args.a, b=args.b))
    log = open(folder / "server.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "mlxcel", "serve", "--config", str(config), "-t", "2"],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{args.port}"
    anonymous = []
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(base + "/health?ready=1", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start: {folder / 'server.log'}")
            time.sleep(0.2)
        started = time.monotonic()
        with httpx.Client(base_url=base, timeout=120) as client:
            for swap in range(args.swaps):
                model = "ab"[swap % 2]
                answer = client.post("/v1/chat/completions", json={
                    "model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
                answer.raise_for_status()
                now = memory(server.pid)
                anonymous.append(now["Anonymous"])
                if (swap + 1) % args.every == 0:
                    print(f"load {swap + 1:4d} ({model}): RSS {now['Rss']} MiB, anonymous {now['Anonymous']} MiB "
                          f"(huge pages {now['AnonHugePages']})", flush=True)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    settled = anonymous[3:] or anonymous
    print(f"{args.swaps} loads in {time.monotonic() - started:.0f} s; anonymous MiB: load 4 {settled[0]}, "
          f"last {anonymous[-1]}, lowest {min(settled)}, highest {max(settled)}"
          + (f"; env {' '.join(args.env)}" if args.env else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
