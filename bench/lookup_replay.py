"""What prompt lookup could gain at best on the decode row's own outputs.

    .venv/bin/python bench/lookup_replay.py [--model GGUF] [--rounds 24] [--tokens 128]

Starts mlxcel with its defaults (`-c 8192 -np 4 -t 2`, as run.py), takes the greedy
outputs of run.py's `decode` prompts, and replays each through the engine's own
`PromptLookup` with an oracle that drafts exactly as many tokens as will be accepted
(none where the first would fail). Each verify batch is priced by the decode cost curve
that server measured on this host (or read back), so a ratio is the oracle's tokens per
second over plain decoding's. It says how much a better draft-length policy, or a
shorter n-gram fallback (`--ngrams 1-3`: the longest n-gram that has an earlier
occurrence), could add on these outputs, and which rounds no policy can speed up.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prompts import short_prompt  # noqa: E402
from servers import DEFAULT_MODEL, ROOT, start_server  # noqa: E402

from mlxcel.engine.prompt_lookup import PromptLookup  # noqa: E402

CURVE_LINE = re.compile(r"decode cost by batch size (?:read back from (\S+)|\(ms\): (.+))")


def cost_curve(log_text: str) -> dict[int, float]:
    """Seconds per batch size, from the server's log: the file it read back, or the
    sizes it measured and logged."""
    for match in CURVE_LINE.finditer(log_text):
        if match.group(1):
            return {int(n): float(s) for n, s in json.loads(Path(match.group(1)).read_text()).items()}
        return {int(n): float(ms) / 1000 for n, ms in (pair.split(":") for pair in match.group(2).split())}
    raise SystemExit("the server logged no decode cost curve (is speculation off?)")


def priced(curve: dict[int, float], n: int) -> float:
    """A batch of n tokens: the measured size, else the nearest measured size above."""
    return curve.get(n) or curve[min((s for s in curve if s >= n), default=max(curve))]


def oracle_seconds(prompt: list[int], output: list[int], curve: dict[int, float], ngrams: range) -> tuple[float, int]:
    """The output decoded with drafts of exactly the length that will be accepted."""
    lookups = [PromptLookup(n, 64, 1) for n in reversed(ngrams)]  # the longest n-gram first
    history, at, seconds, steps = list(prompt), 0, 0.0, 0
    while at < len(output):
        proposal: list[int] = []
        for lookup in lookups:
            proposal = lookup.draft(history, 16).tokens
            if proposal:
                break
        accepted = 0
        while accepted < len(proposal) and at + accepted < len(output) and output[at + accepted] == proposal[accepted]:
            accepted += 1
        taken = min(accepted + 1, len(output) - at)
        history += output[at : at + taken]
        at += taken
        seconds += priced(curve, taken)
        steps += 1
    return seconds, steps


def ngram_range(text: str) -> range:
    low, _, high = text.partition("-")
    return range(int(low), int(high or low) + 1)


async def outputs(url: str, rounds: int, tokens: int) -> list[tuple[list[int], list[int]]]:
    async with httpx.AsyncClient(base_url=url, timeout=300, trust_env=False) as client:
        pairs = []
        for rnd in range(rounds):
            prompt = short_prompt(f"decode-{rnd}")
            body = {"prompt": prompt, "n_predict": tokens, "temperature": 0, "ignore_eos": True,
                    "cache_prompt": False, "return_tokens": True}
            answer = (await client.post("/completion", json=body)).json()
            tokenized = (await client.post("/tokenize", json={"content": prompt, "add_special": True})).json()
            pairs.append((tokenized["tokens"], answer["tokens"]))
        return pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--ngrams", type=ngram_range, action="append",
                    help="n-gram sizes tried, longest first (default: 3, then 1-3)")
    args = ap.parse_args()
    server = start_server("mlxcel-replay", [str(ROOT / ".venv/bin/mlxcel"), "serve", "-m", str(args.model),
                                            "-c", "8192", "-np", "4", "-t", "2"], ROOT / "bench/results/logs")
    try:
        pairs = asyncio.run(outputs(server.url, args.rounds, args.tokens))
        curve = cost_curve(server.log_path.read_text(errors="replace"))
    finally:
        server.stop()
    print("cost curve (ms):", " ".join(f"{n}:{1000 * s:.1f}" for n, s in sorted(curve.items()) if n <= 16))
    for ngrams in args.ngrams or [range(3, 4), range(1, 4)]:
        plain = oracle = 0.0
        rows = []
        for prompt, output in pairs:
            seconds, steps = oracle_seconds(prompt, output, curve, ngrams)
            alone = len(output) * curve[1]
            plain, oracle = plain + alone, oracle + seconds
            rows.append(f"{alone / seconds:.2f}")
        print(f"n-grams {ngrams.start}-{ngrams.stop - 1}: oracle / plain {plain / oracle:.3f}; "
              f"by round {' '.join(rows)}")


if __name__ == "__main__":
    main()
