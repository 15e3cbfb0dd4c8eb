"""Benchmark mlxcel against the reference llama-server, same model and settings.

    .venv/bin/python bench/run.py [--model PATH] [--threads 2] [--parallel 4]
        [--ctx 8192] [--rounds 3] [--only decode,prefill,...] [--mlxcel-cmd CMD]
        [--llama-server PATH] [--json OUT] [--restart]

Starts both servers (loopback), warms each up once, then for each scenario runs
--rounds rounds, one server at a time, mlxcel first in even rounds and llama-server
first in odd ones, and prints medians and the median of the per-round ratios. With
--restart, both servers start afresh for every round, which then runs every scenario:
one process runs a few % faster or slower than the next for all its life (where its
buffers land), so one start per run cannot average that out. See bench/README.md.
"""
from __future__ import annotations

import argparse
import asyncio
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import reference
from bare_worker import BareWorker
from client import make_client, stream_completion
from report import Round, args_config, summarize, table, write_json
from scenarios import SCENARIOS, SHORT_PROMPT_CACHE, PromptBook
from servers import HOST, Server, free_port, supports_flag

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = Path.home() / ".cache" / "mlxcel" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_CATALOG_NAME = "smollm2-135m-instruct"
MLXCEL_BIN = REPO / ".venv" / "bin" / "mlxcel"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("--parallel", "-np", type=int, default=4)
    ap.add_argument("--ctx", "-c", type=int, default=8192)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated scenarios: "
                    + ",".join(SCENARIOS))
    ap.add_argument("--mlxcel-cmd", default=f"{MLXCEL_BIN} serve",
                    help="command prefix for server A; '-m -c -np -t --host --port' "
                         "are appended (default: %(default)s)")
    ap.add_argument("--llama-server", default=None,
                    help="reference binary (default: built from llama-cpp-python "
                         "--reference-version by bench/reference.py)")
    ap.add_argument("--reference-version", default=reference.DEFAULT_VERSION)
    ap.add_argument("--startup-timeout", type=float, default=600)
    ap.add_argument("--log-dir", type=Path, default=REPO / "bench" / "results" / "logs")
    ap.add_argument("--json", type=Path, default=None, help="write all raw samples here")
    ap.add_argument("--no-bare", action="store_true",
                    help="skip the bare decode loop column (bench/bare_loop.py)")
    ap.add_argument("--cache-prompt", action="store_true",
                    help="the short-prompt rows (decode, chat_decode, aggregate4, latency16) send cache_prompt "
                         "true, both servers' default, instead of false")
    ap.add_argument("--restart", action="store_true",
                    help="start both servers afresh for every round (each round then runs every scenario)")
    args = ap.parse_args(argv)
    SHORT_PROMPT_CACHE["cache_prompt"] = args.cache_prompt
    args.scenarios = [s for s in args.only.split(",") if s] or list(SCENARIOS)
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        ap.error(f"unknown scenario(s) {sorted(unknown)}; choose from {list(SCENARIOS)}")
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    return args


def ensure_model(path: Path) -> Path:
    if path.is_file():
        return path
    if path != DEFAULT_MODEL:
        raise SystemExit(f"model not found: {path}")
    if not MLXCEL_BIN.exists():
        raise SystemExit(f"{path} is missing and {MLXCEL_BIN} is not installed to pull it; "
                         "see /work/shared/models.md or pass --model")
    log(f"pulling {DEFAULT_CATALOG_NAME} ...")
    subprocess.run([str(MLXCEL_BIN), "pull", DEFAULT_CATALOG_NAME], check=True, timeout=1800)
    if not path.is_file():
        raise SystemExit(f"`mlxcel pull` finished but {path} is still missing")
    return path


def make_servers(args: argparse.Namespace, model: Path, ref_bin: str) -> list[Server]:
    def common(port: int) -> list[str]:
        return ["-m", str(model), "-c", str(args.ctx), "-np", str(args.parallel),
                "-t", str(args.threads), "--host", HOST, "--port", str(port)]

    a_port, b_port = free_port(), free_port()
    while b_port == a_port:
        b_port = free_port()
    mlxcel_argv = shlex.split(args.mlxcel_cmd) + common(a_port)
    if not shutil.which(mlxcel_argv[0]):
        raise SystemExit(f"mlxcel command not found: {mlxcel_argv[0]} (install mlxcel "
                         "into .venv or pass --mlxcel-cmd)")
    ref_argv = [ref_bin, *common(b_port)]
    if supports_flag(ref_bin, "--no-webui"):
        ref_argv.append("--no-webui")
    return [Server("mlxcel", mlxcel_argv, a_port, args.log_dir / "mlxcel.log"),
            Server("llama-server", ref_argv, b_port, args.log_dir / "llama-server.log")]


def _brief(metrics: dict[str, float]) -> str:
    return " ".join(f"{k}={v:.4g}" for k, v in metrics.items())


async def benchmark(args: argparse.Namespace, a: Server, b: Server,
                    bare: BareWorker | None = None, only_round: int | None = None) -> list[Round]:
    rounds: list[Round] = []
    book = PromptBook(sizing_url=b.url)
    async with make_client() as client:
        for server in (a, b):
            r = await stream_completion(client, server.url, "Warm-up: say hello.", n_predict=8)
            log(f"warm-up {server.name}: {r.n_tokens} tokens in {r.latency:.2f}s")
        for name in args.scenarios:
            fn = SCENARIOS[name]
            for rnd in range(args.rounds) if only_round is None else (only_round,):
                measured = {}
                for server in (a, b) if rnd % 2 == 0 else (b, a):  # ABBA: neither always goes first
                    measured[server.name] = await fn(client, server.url, rnd, book)
                    log(f"{name} round {rnd + 1}/{args.rounds} {server.name}: {_brief(measured[server.name].metrics)}")
                ma, mb = measured[a.name], measured[b.name]
                mc = await asyncio.to_thread(bare.measure, name, rnd) if bare else None
                if mc:
                    log(f"{name} round {rnd + 1}/{args.rounds} bare loop: {_brief(mc)}")
                rounds.append(Round(name, rnd, ma, mb, mc))
    return rounds


def run_loop(coro):
    """The client's event loop: uvloop where installed (uvicorn's `standard` extra brings it):
    it spends less of the cores the servers compute on per streamed token (bench/README.md)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def start_all(args: argparse.Namespace, servers: list[Server], info: dict[str, dict]) -> None:
    """Start the servers one at a time (loading is CPU-bound); `info` keeps each one's
    argv and its start-up seconds (a list, one per start)."""
    for s in servers:
        log(f"starting {s.name}: {shlex.join(s.argv)}")
        t0 = time.monotonic()
        s.start()
        s.wait_healthy(args.startup_timeout)
        entry = info.setdefault(s.name, {"argv": s.argv, "startup_s": [], "peak_rss_mib": None})
        entry["startup_s"].append(time.monotonic() - t0)
        log(f"{s.name} healthy after {entry['startup_s'][-1]:.1f}s (log {s.log_path})")


def stop_all(servers: list[Server], info: dict[str, dict]) -> None:
    """Read each server's peak RSS (the largest over its starts) and stop it."""
    for s in servers:
        peak, entry = s.peak_rss_mib(), info[s.name]
        if peak is not None:
            entry["peak_rss_mib"] = max(peak, entry["peak_rss_mib"] or 0)
        s.stop()


def _on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    model = ensure_model(args.model.expanduser())
    if args.llama_server:
        ref_bin = args.llama_server
    else:
        if not reference.binary_path(args.reference_version).is_file():
            log(f"building llama-server {args.reference_version} (10-15 minutes) ...")
        ref_bin = str(reference.ensure_llama_server(args.reference_version))
    servers = make_servers(args, model, ref_bin)
    server_info: dict[str, dict] = {}
    bare = None
    try:
        if not args.no_bare:
            bare = BareWorker(model, args.ctx, args.parallel, args.threads, args.log_dir / "bare_loop.log")
        if args.restart:
            rounds = []
            for rnd in range(args.rounds):
                start_all(args, servers, server_info)
                rounds += run_loop(benchmark(args, *servers, bare, only_round=rnd))
                stop_all(servers, server_info)
        else:
            start_all(args, servers, server_info)
            rounds = run_loop(benchmark(args, *servers, bare))
            stop_all(servers, server_info)
    finally:
        for s in servers:
            s.stop()
        if bare is not None:
            bare.stop()

    rows = summarize(rounds)
    print(f"\nmodel {model.name}, -c {args.ctx} -np {args.parallel} -t {args.threads}, "
          f"{args.rounds} round(s); ratio = median of per-round mlxcel/llama-server\n")
    print(table(rows))
    rss = ", ".join(f"{n} {i.get('peak_rss_mib') or float('nan'):.0f} MiB"
                    for n, i in server_info.items())
    print(f"\npeak RSS: {rss}")
    if bare is not None:
        print("bare: bench/bare_loop.py in the same run, same -c/-np/-t, greedy argmax, no server; "
              "'split' = kv_unified false (as both servers run), 'unified' = kv_unified true. "
              "decode rows compare its decode steps, aggregate4 its prefill + decode wall time")
    if args.json:
        config = args_config(args)
        write_json(args.json, config, server_info, rounds, rows)
        print(f"raw samples: {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted; servers stopped")
        sys.exit(130)
