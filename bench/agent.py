"""Agent conversations: many multi-turn conversations sharing a long system prompt,
fewer slots than conversations, mlxcel against llama-server in one run.

Each conversation starts with the same ~1,500-token system prompt (an agent's
instructions and tool list), then sends a 50-150-token user turn, reads the reply
(greedy, `max_tokens` fixed, EOS ignored), appends it and sends the next turn, as
coding agents and chat UIs resend their whole history. Conversations run at once, so
with more of them than slots they are evicted and come back. Even conversations talk
to /v1/chat/completions, odd ones to /v1/messages; both are streamed.

Reported per server: time to first token per turn (p50, p95, over every turn of
every round), wall time of a round, and prompt tokens the server decoded per turn
(from its /metrics: what it could not take from a cache). For mlxcel the time to
first token is split, as means per turn from its /metrics counters, into waiting for
a slot, restoring cached state (admission) and prefilling, with the tokens prefilled.

    .venv/bin/python bench/agent.py [--conversations 6] [--turns 12] [--rounds 2] [--model GGUF]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from prompts import text_words  # noqa: E402
from reference import ensure_llama_server  # noqa: E402
from servers import Server, llama_server_argv, start_server  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODEL = Path.home() / ".cache/mlxcel/models/SmolLM2-135M-Instruct.Q4_1.gguf"
NO_KEEPALIVE = httpx.Limits(max_keepalive_connections=0)  # llama-server drops idle pooled connections
TOOLS = ["read_file", "write_file", "list_directory", "search_code", "run_tests", "run_command", "git_diff",
         "git_commit", "open_url", "ask_user", "edit_range", "find_symbol"]


@dataclass
class Turn:
    conversation: int
    turn: int
    api: str
    ttft_s: float
    total_s: float
    completion_tokens: int
    timings: dict | None = None  # the server's own split of this turn, where its stream carries one


def run_staggered(threads: list[threading.Thread], stagger_s: float) -> float:
    """Start the conversations `stagger_s` apart, wait for all; the wall time."""
    started = time.perf_counter()
    for thread in threads:
        thread.start()
        time.sleep(stagger_s)
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def system_prompt(seed: str, n_words: int) -> str:
    """An agent's instructions and a tool list in JSON: the prefix every conversation shares."""
    rng = random.Random(seed)
    tools = [{"name": name, "description": text_words(f"{seed}-{name}", rng.randint(20, 35)),
              "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                              "query": {"type": "string"}}}}
             for name in TOOLS]
    head = text_words(f"{seed}-rules", max(50, n_words - 30 * len(TOOLS)))
    return f"You are a coding agent. {head}\n\nTools:\n{json.dumps(tools, indent=1)}"


def user_turn(seed: str, conversation: int, turn: int) -> str:
    rng = random.Random(f"{seed}-{conversation}-{turn}")
    return text_words(f"{seed}-u{conversation}-{turn}", rng.randint(38, 110))


def _events(response: httpx.Response):
    for line in response.iter_lines():
        if line.startswith("data:") and not line.endswith("[DONE]"):
            yield json.loads(line[5:])


def send(client: httpx.Client, url: str, api: str, system: str, history: list[dict], max_tokens: int,
         timings: bool = False) -> tuple[float, float, str, int, dict | None]:
    """(time to first token, total time, reply text, completion tokens, the server's timings) of one
    streamed turn."""
    common = {"max_tokens": max_tokens, "stream": True, "temperature": 0, "ignore_eos": True}
    if timings:
        common["timings_per_token"] = True  # llama-server's field: timings on every chunk, so on the last
    if api == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "system", "content": system}, *history],
                                              "stream_options": {"include_usage": True}, **common}
    else:
        path, body = "/v1/messages", {"system": system, "messages": history, **common}
    sent = time.perf_counter()
    first, text, tokens, split = None, [], 0, None
    with client.stream("POST", url + path, json={"model": "m", **body}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{path} -> HTTP {response.status_code}: {response.read()[:300]!r}")
        for event in _events(response):
            piece = ""
            if api == "chat":
                for choice in event.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content") or ""
                split = event.get("timings") or split
                if event.get("usage"):
                    tokens = event["usage"].get("completion_tokens", tokens)
            elif event.get("type") == "content_block_delta":
                piece = event["delta"].get("text", "")
            elif event.get("type") == "message_delta":
                tokens = (event.get("usage") or {}).get("output_tokens", tokens)
            if piece:
                first = first or time.perf_counter()
                text.append(piece)
    done = time.perf_counter()
    return (first or done) - sent, done - sent, "".join(text), tokens, split


def conversation(url: str, index: int, seed: str, system: str, turns: int, max_tokens: int,
                 out: list[Turn], errors: list[str], timings: bool = False) -> None:
    api = "chat" if index % 2 == 0 else "messages"
    history: list[dict] = []
    try:
        with httpx.Client(trust_env=False, timeout=900, limits=NO_KEEPALIVE) as client:
            for turn in range(turns):
                history.append({"role": "user", "content": user_turn(seed, index, turn)})
                ttft, total, reply, tokens, split = send(client, url, api, system, history, max_tokens, timings)
                history.append({"role": "assistant", "content": reply})
                out.append(Turn(index, turn, api, ttft, total, tokens, split))
    except Exception as exc:  # noqa: BLE001 - reported, the round is then invalid
        errors.append(f"conversation {index}: {exc}")


def scrape(url: str) -> dict[str, float]:
    """Every sample of the server's /metrics, by name (labels kept in the name)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                values[name] = float(value)
            except ValueError:
                pass
    return values


def run_round(server: Server, seed: str, args) -> dict:
    system = system_prompt(seed, args.system_words)
    n_system = len(httpx.post(server.url + "/tokenize", json={"content": system}, timeout=60).json()["tokens"])
    before = scrape(server.url)
    turns: list[Turn] = []
    errors: list[str] = []
    threads = [threading.Thread(target=conversation,
                                args=(server.url, i, seed, system, args.turns, args.max_tokens, turns, errors,
                                      args.timings))
               for i in range(args.conversations)]
    wall = run_staggered(threads, args.stagger)
    after = scrape(server.url)
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    if errors:
        raise RuntimeError(f"{server.name}: " + "; ".join(errors))
    return {"wall_s": wall, "system_tokens": n_system, "turns": [asdict(t) for t in turns], "metrics": delta}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def summary(rounds: list[dict]) -> dict:
    ttfts = [t["ttft_s"] for r in rounds for t in r["turns"]]
    n_turns = sum(len(r["turns"]) for r in rounds)
    m = {k: sum(r["metrics"].get(k, 0.0) for r in rounds) for k in rounds[0]["metrics"]}
    out = {"p50_ttft_s": pct(ttfts, 0.5), "p95_ttft_s": pct(ttfts, 0.95), "mean_ttft_s": statistics.fmean(ttfts),
           "wall_s": statistics.median(r["wall_s"] for r in rounds),
           "prefilled_tokens_per_turn": m.get("llamacpp:prompt_tokens_total", float("nan")) / n_turns}
    if m.get("mlxcel_first_tokens_total"):
        n = m["mlxcel_first_tokens_total"]
        out["split_ms"] = {
            "wait": 1e3 * m["mlxcel_first_token_wait_seconds_total"] / n,
            "restore": 1e3 * m["mlxcel_first_token_restore_seconds_total"] / n,
            "prefill": 1e3 * m["mlxcel_first_token_prefill_seconds_total"] / n,
            "prefill_tokens": m["mlxcel_first_token_prefill_tokens_total"] / n,
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=MODEL)
    ap.add_argument("--conversations", type=int, default=6)
    ap.add_argument("--turns", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--system-words", type=int, default=650, help="about 1,500 tokens")
    ap.add_argument("--stagger", type=float, default=0.25, help="seconds between conversations' starts")
    ap.add_argument("--server-args", default="-c 16384 -np 4 -t 2")
    ap.add_argument("--mlxcel-cmd", default=str(ROOT / ".venv/bin/mlxcel") + " serve")
    ap.add_argument("--mlxcel-args", default="", help="extra flags for mlxcel only")
    ap.add_argument("--only", default="mlxcel,llama-server")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--timings", action="store_true",
                    help="ask for timings_per_token, so each chat turn's own split lands in the --json output")
    ap.add_argument("--log-dir", type=Path, default=ROOT / "bench/results/logs")
    args = ap.parse_args()
    common = ["-m", str(args.model), *args.server_args.split(), "--metrics"]
    commands = {"mlxcel": [*args.mlxcel_cmd.split(), *common, *args.mlxcel_args.split()]}
    if "llama-server" in args.only:
        ref = str(ensure_llama_server())
        commands["llama-server"] = llama_server_argv(ref, common)
    names = [n for n in commands if n in args.only.split(",")]
    servers = {name: start_server(name, commands[name], args.log_dir) for name in names}
    results: dict[str, list[dict]] = {name: [] for name in names}
    try:
        for rnd in range(args.rounds):
            for name in names:
                result = run_round(servers[name], f"agent-r{rnd}", args)
                results[name].append(result)
                print(f"round {rnd + 1} {name}: wall {result['wall_s']:.1f} s, system prompt "
                      f"{result['system_tokens']} tokens", flush=True)
        rss = {name: servers[name].peak_rss_mib() for name in names}
    finally:
        for server in servers.values():
            server.stop()
    sums = {name: summary(results[name]) for name in names}
    print(f"\nagent conversations: {args.conversations} x {args.turns} turns, {args.server_args}, "
          f"max_tokens {args.max_tokens}, {args.rounds} rounds, {args.model.name}")
    print(f"{'':14}{'p50 TTFT s':>12}{'p95 TTFT s':>12}{'mean TTFT s':>12}{'wall s':>9}{'prefilled/turn':>16}"
          f"{'peak RSS MiB':>14}")
    for name in names:
        s = sums[name]
        print(f"{name:14}{s['p50_ttft_s']:12.3f}{s['p95_ttft_s']:12.3f}{s['mean_ttft_s']:12.3f}{s['wall_s']:9.1f}"
              f"{s['prefilled_tokens_per_turn']:16.1f}{rss[name] or float('nan'):14.0f}")
    if len(names) == 2:
        a, b = sums["mlxcel"], sums["llama-server"]
        print(f"ratio mlxcel/llama-server: p50 {a['p50_ttft_s'] / b['p50_ttft_s']:.3f} (target <= 0.25)  "
              f"p95 {a['p95_ttft_s'] / b['p95_ttft_s']:.3f} (target <= 0.3)  wall {a['wall_s'] / b['wall_s']:.3f}")
    split = sums.get("mlxcel", {}).get("split_ms")
    if split:
        print(f"mlxcel TTFT split, mean per turn: wait {split['wait']:.0f} ms, restore {split['restore']:.0f} ms, "
              f"prefill {split['prefill']:.0f} ms for {split['prefill_tokens']:.0f} tokens")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "summary": sums,
                                         "peak_rss_mib": rss, "rounds": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
