"""Depth: prefill and decode speed as the prompt grows, mlxcel against llama-server.

    .venv/bin/python bench/depth.py [--depths 512,2048,4096,8000] [--rounds 2]
        [--scan-rounds 1] [--n-predict 128] [--ctx 16384] [--threads 2] [--model PATH]
        [--mlxcel-cmd CMD] [--llama-server PATH] [--plot OUT.png] [--json OUT]

One slot (`-np 1`). For each depth a prompt of that many tokens (deterministic text,
sized with the reference's POST /tokenize and checked on each server, new text for
every depth and round) is sent as a streamed /completion with `cache_prompt: false`,
greedy, `ignore_eos`, `--n-predict` tokens: prefill tokens/s = prompt tokens / time to
first token, and decode tokens/s after it (first to last token, at that depth). The
last depth is the headline (`--rounds` rounds, targets prefill >= 1.0x, decode >=
0.95x); the others get `--scan-rounds`. Prints the ratio table, the growth table
(prefill time and decode tokens/s per depth for both servers) and, when matplotlib
is importable, plots it. See bench/README.md.
"""
from __future__ import annotations

import argparse
import asyncio
import math
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import reference
from client import make_client, stream_completion, tokenize
from prompts import long_prompt
from report import Round, Row, args_config, clean_rounds, summarize, table, write_json
from run import MLXCEL_BIN, REPO, ensure_model, make_servers
from scenarios import Measurement
from servers import OtherLoad, running

DEFAULT_MODEL = Path.home() / ".cache" / "mlxcel" / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def scenario(depth: int) -> str:
    return f"depth{depth}"


async def one_depth(client, url: str, text: str, n_tok: int, n_predict: int) -> Measurement:
    r = await stream_completion(client, url, text, n_predict=n_predict)
    n_prompt = r.tokens_evaluated or n_tok
    metrics = {"prompt_tps": n_prompt / r.ttft, "ttft_s": r.ttft, "decode_tps": r.decode_tps(),
               "prompt_tokens": float(n_prompt)}
    for ours, theirs in (("server_prompt_tps", "prompt_per_second"), ("server_decode_tps", "predicted_per_second")):
        if theirs in r.timings:
            metrics[ours] = float(r.timings[theirs])
    raw = {"n_tokens": r.n_tokens, "ttft_s": r.ttft, "latency_s": r.latency, "tokens_evaluated": r.tokens_evaluated,
           "prompt_tokens_tokenize": n_tok, "timings": r.timings}
    return Measurement(metrics, raw)


async def benchmark(args: argparse.Namespace, a, b) -> list[Round]:
    rounds: list[Round] = []
    async with make_client() as client:
        for server in (a, b):
            r = await stream_completion(client, server.url, "Warm-up: say hello.", n_predict=8)
            log(f"warm-up {server.name}: {r.n_tokens} tokens in {r.latency:.2f}s")
        headline = args.depths[-1]
        for rnd in range(max(args.rounds, args.scan_rounds)):
            for depth in args.depths:
                if rnd >= (args.rounds if depth == headline else args.scan_rounds):
                    continue
                # sized on the reference, sent verbatim to both; each server's count checked
                text, _ = await long_prompt(client, b.url, f"depth-{depth}-{rnd}", depth)
                pair = []
                for server in (a, b):
                    n_tok = await tokenize(client, server.url, text)
                    for attempt in range(args.retries + 1):
                        watch = OtherLoad(server)
                        m = await one_depth(client, server.url, text, n_tok, args.n_predict)
                        m.raw["other_load"] = watch.share()
                        log(f"depth {depth} round {rnd + 1} {server.name}: "
                            + " ".join(f"{k}={v:.4g}" for k, v in m.metrics.items())
                            + f" (other load on the cores {m.raw['other_load']:.0%})")
                        if not m.raw["other_load"] > args.max_other_load:
                            break
                        if attempt < args.retries:
                            log("  the cores were busy with something else: measuring again")
                    pair.append(m)
                rounds.append(Round(scenario(depth), rnd, *pair))
    return rounds


def growth_table(rows: list[Row], depths: list[int]) -> str:
    cell = {(r.scenario, r.metric): r for r in rows}
    header = ("| depth (tokens) | prefill s, mlxcel | prefill s, llama-server | prefill tok/s ratio "
              "| decode tok/s, mlxcel | decode tok/s, llama-server | decode ratio |")
    lines = [header, "|---|---|---|---|---|---|---|"]
    for d in depths:
        t, p, dec = (cell.get((scenario(d), m)) for m in ("ttft_s", "prompt_tps", "decode_tps"))
        if t is None or p is None or dec is None:
            continue
        lines.append(f"| {d} | {t.mlxcel:.2f} | {t.reference:.2f} | {p.ratio:.3f} | {dec.mlxcel:.1f} "
                     f"| {dec.reference:.1f} | {dec.ratio:.3f} |")
    return "\n".join(lines)


def plot(rows: list[Row], depths: list[int], out: Path, title: str) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "plot skipped: matplotlib is not importable (install it to get one; mlxcel does not depend on it)"
    cell = {(r.scenario, r.metric): r for r in rows}
    shown = [d for d in depths if (scenario(d), "ttft_s") in cell and (scenario(d), "decode_tps") in cell]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for attr, label in (("mlxcel", "mlxcel"), ("reference", "llama-server")):
        left.plot(shown, [getattr(cell[(scenario(d), "ttft_s")], attr) for d in shown], marker="o", label=label)
        right.plot(shown, [getattr(cell[(scenario(d), "decode_tps")], attr) for d in shown], marker="o", label=label)
    left.set(xlabel="prompt tokens", ylabel="prefill time (s)", title="prefill time")
    right.set(xlabel="prompt tokens (decode depth)", ylabel="tokens/s", title="decode speed at depth")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return f"plot: {out}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("--ctx", "-c", type=int, default=16384)
    ap.add_argument("--depths", default="512,2048,4096,8000",
                    help="prompt sizes in tokens, ascending; the last is the headline")
    ap.add_argument("--rounds", type=int, default=2, help="rounds at the headline (last) depth")
    ap.add_argument("--scan-rounds", type=int, default=1, help="rounds at the other depths")
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--max-other-load", type=float, default=0.15,
                    help="redo a pass during which other processes took more than this share of the cores")
    ap.add_argument("--retries", type=int, default=2, help="most redone passes per measurement")
    ap.add_argument("--mlxcel-cmd", default=f"{MLXCEL_BIN} serve")
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--reference-version", default=reference.DEFAULT_VERSION)
    ap.add_argument("--startup-timeout", type=float, default=600)
    ap.add_argument("--log-dir", type=Path, default=REPO / "bench" / "results" / "logs")
    ap.add_argument("--plot", type=Path, default=REPO / "bench" / "results" / "depth.png")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    args.parallel = 1
    try:
        args.depths = sorted(int(d) for d in args.depths.split(",") if d.strip())
    except ValueError:
        ap.error("--depths takes comma-separated token counts")
    if not args.depths or args.depths[0] < 16 or args.depths[-1] + args.n_predict + 8 > args.ctx:
        ap.error("--depths must be >= 16 and leave room for --n-predict within --ctx")
    if min(args.rounds, args.n_predict) < 1 or args.scan_rounds < 0:
        ap.error("--rounds and --n-predict must be >= 1, --scan-rounds >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    model = args.model.expanduser()
    if not model.is_file():
        model = ensure_model(model)
    ref_bin = args.llama_server or str(reference.ensure_llama_server(args.reference_version))
    servers = make_servers(args, model, ref_bin)
    with running(servers, args.startup_timeout, log) as info:
        rounds = asyncio.run(benchmark(args, *servers))

    headline = scenario(args.depths[-1])
    targets = {(headline, "prompt_tps"): (">=", 1.0), (headline, "decode_tps"): (">=", 0.95)}
    kept, left_out = clean_rounds(rounds, args.max_other_load)
    rows = summarize(kept, targets)
    if left_out:
        print(f"\n{left_out} round(s) left out: other processes took over {args.max_other_load:.0%} of the cores "
              "even when measured again (all rounds are in --json)")
    setup = f"model {model.name}, -c {args.ctx} -np 1 -t {args.threads}, {args.n_predict} tokens decoded"
    print(f"\n{setup}; {args.rounds} round(s) at {args.depths[-1]} tokens, {args.scan_rounds} at the others; "
          "ratio = median of per-round mlxcel/llama-server\n")
    print(table(rows))
    print("\nhow cost grows (medians):\n")
    print(growth_table(rows, args.depths))
    print("\n" + plot(rows, args.depths, args.plot, setup))
    rss = ", ".join(f"{n} {i.get('peak_rss_mib') or math.nan:.0f} MiB" for n, i in info.items())
    print(f"peak RSS: {rss}")
    if args.json:
        config = args_config(args)
        write_json(args.json, config, info, rounds, rows)
        print(f"raw samples: {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        log("interrupted; servers stopped")
        sys.exit(130)
