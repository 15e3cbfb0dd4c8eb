"""mlxcel against mlxcel: variants (trees, flags) on the aggregate4 workload, with the
engine's own step counters beside the wall-clock rate.

    .venv/bin/python bench/variants.py NAME="CMD" NAME="CMD" ... [--model GGUF] [--cycles 4]
        [--streams 4] [--tokens 128] [--rounds 3]

Each CMD starts mlxcel (for example ".venv/bin/mlxcel serve --spec-type none", or a
script that runs an exported older tree); `-m -c 8192 -np 4 -t 2 --metrics` are
appended. With `--churn CLIENTS`, CLIENTS clients instead send 12 requests each in
turn (fresh prompts, answers of various lengths), so slots free up and refill while
others decode. With `--chat`, the streams are `/v1/chat/completions` sampled as
run.py's chat_decode samples (temperature 0.7, top-k 40, top-p 0.9, min-p 0.05, repeat
penalty 1.1; EOS ignored), and the sample phase's milliseconds per step are reported
too. With `--prompt-words N`, each greedy stream's prompt is ~N words of fresh text
(about 1.3 tokens a word), and the servers' own `timings` give two more figures: prompt
tokens/s (prefill) and tokens/s decoding after that prompt (the attention kernel's
trade, for example `-fa on` against `-fa off`). Variants run one at a time, a fresh server each, in ABBA order over the
cycles, so a machine whose speed drifts drifts over all of them alike. Per run: tokens/s
over `--rounds` rounds of `--streams` concurrent greedy `/completion` streams (short
prompts, `--tokens` each, EOS ignored), engine steps, `llama_decode` milliseconds per
token generated, tokens drafted and accepted, schedule milliseconds per step. Steps
and drafts do not depend on the host's noise; decode milliseconds per token depend on
it less than the wall-clock rate does (the client and the event loop are not in it).
"""
from __future__ import annotations

import argparse
import asyncio
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from client import make_client, stream_chat, stream_completion  # noqa: E402
from prompts import short_prompt, text_words  # noqa: E402
from servers import start_server  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = Path.home() / ".cache/mlxcel/models/SmolLM2-135M-Instruct.Q4_1.gguf"


def engine_counters(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10, trust_env=False).text
    return {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
            if line.startswith("mlxcel_engine_step")}


async def churning_client(client: httpx.AsyncClient, url: str, c: int, requests: int, tokens: int) -> list:
    """One client's requests one after another, each a fresh prompt of tokens/3..tokens+32 tokens' answer."""
    rng, results = random.Random(c), []
    for j in range(requests):
        results.append(await stream_completion(client, url, short_prompt(f"churn-{c}-{j}"),
                                               rng.randint(max(1, tokens // 3), tokens + 32)))
    return results


def _prompt(seed: str, words: int) -> str:
    return f"{text_words(seed, words)} Continue:" if words else short_prompt(seed)


async def one_run(url: str, rounds: int, streams: int, tokens: int, churn: int, chat: bool,
                  prompt_words: int = 0) -> dict[str, float]:
    done = wall = drafted = accepted = 0.0
    prefill_tps: list[float] = []
    decode_tps: list[float] = []
    async with make_client() as client:
        await stream_completion(client, url, short_prompt("warm"), 8)
        before = engine_counters(url)
        for r in range(rounds):
            started = time.perf_counter()
            if churn:
                per_client = await asyncio.gather(*(churning_client(client, url, 100 * r + c, 12, tokens)
                                                    for c in range(churn)))
                results = [result for chunk in per_client for result in chunk]
            elif chat:
                results = await asyncio.gather(*(stream_chat(client, url, short_prompt(f"chat-{r}-{i}"), tokens,
                                                             seed=1000 + 10 * r + i) for i in range(streams)))
            else:
                results = await asyncio.gather(*(stream_completion(client, url, _prompt(f"agg-{r}-{i}", prompt_words),
                                                                   tokens) for i in range(streams)))
            wall += time.perf_counter() - started
            done += sum(result.n_tokens for result in results)
            drafted += sum((result.timings or {}).get("draft_n", 0) for result in results)
            accepted += sum((result.timings or {}).get("draft_n_accepted", 0) for result in results)
            prefill_tps += [result.timings["prompt_per_second"] for result in results if result.timings]
            decode_tps += [result.timings["predicted_per_second"] for result in results if result.timings]
        after = engine_counters(url)
    steps = after["mlxcel_engine_steps_total"] - before.get("mlxcel_engine_steps_total", 0)
    decode = after["mlxcel_engine_step_decode_seconds_total"] - before.get("mlxcel_engine_step_decode_seconds_total", 0)
    schedule = (after["mlxcel_engine_step_schedule_seconds_total"]
                - before.get("mlxcel_engine_step_schedule_seconds_total", 0))
    sample = after["mlxcel_engine_step_sample_seconds_total"] - before.get("mlxcel_engine_step_sample_seconds_total", 0)
    run = {"tok/s": done / wall, "steps": steps, "decode ms/token": 1e3 * decode / done,
           "drafted": drafted, "accepted": accepted, "schedule ms/step": 1e3 * schedule / max(steps, 1),
           "sample ms/step": 1e3 * sample / max(steps, 1)}
    if prompt_words and prefill_tps:
        run |= {"prompt tok/s": statistics.median(prefill_tps), "decode tok/s": statistics.median(decode_tps)}
    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="+", help='NAME="command that starts mlxcel"')
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--cycles", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--churn", type=int, default=0, metavar="CLIENTS",
                    help="instead: CLIENTS clients (fewer than the 4 slots) sending 12 requests each in turn, "
                         "fresh prompts, answers of tokens/3..tokens+32 tokens: slots free up and refill")
    ap.add_argument("--chat", action="store_true",
                    help="sampled /v1/chat/completions streams (run.py's chat_decode chain) instead of greedy /completion")
    ap.add_argument("--prompt-words", type=int, default=0, metavar="N",
                    help="greedy streams' prompts of ~N words (fresh text): adds prefill and decode tokens/s "
                         "from the servers' timings")
    ap.add_argument("--log-dir", type=Path, default=ROOT / "bench/results/logs")
    args = ap.parse_args()
    variants = dict(v.split("=", 1) for v in args.variants)
    common = ["-m", str(args.model), "-c", "8192", "-np", "4", "-t", "2", "--metrics"]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    args.log_dir.mkdir(parents=True, exist_ok=True)
    for cycle in range(args.cycles):
        order = list(variants.items()) if cycle % 2 == 0 else list(reversed(variants.items()))
        for name, command in order:
            server = start_server(name, [*shlex.split(command), *common], args.log_dir)
            try:
                run = asyncio.run(one_run(server.url, args.rounds, args.streams, args.tokens, args.churn, args.chat,
                                          args.prompt_words))
            finally:
                server.stop()
            runs[name].append(run)
            print(name + ": " + "  ".join(f"{key} {value:.3g}" for key, value in run.items()), flush=True)
    workload = (f"{args.churn} churning clients" if args.churn else
                f"{args.streams} {'sampled chat' if args.chat else 'greedy'} streams x {args.tokens} tokens"
                + (f" after ~{args.prompt_words}-word prompts" if args.prompt_words and not args.chat else ""))
    print(f"\n{args.model.name}, {workload}, {args.rounds} rounds a run, "
          f"{args.cycles} runs each; medians")
    first = next(iter(runs))
    for name, rows in runs.items():
        medians = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
        ratio = medians["tok/s"] / statistics.median(row["tok/s"] for row in runs[first])
        print(f"{name:>12}: " + "  ".join(f"{key} {value:.3g}" for key, value in medians.items())
              + f"  tok/s / {first} {ratio:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
