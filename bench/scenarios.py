"""The benchmark scenarios: one async function each, one measurement per call.

Every scenario takes (client, server url, round number, prompt book) and
returns a Measurement. The prompts depend only on the scenario and the round,
so both servers get the same prompts within a round.
"""
from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

import httpx

from client import StreamResult, stream_chat, stream_completion, tokenize
from prompts import long_prompt, short_prompt

LONG_PROMPT_TOKENS = 1000


@dataclass
class Measurement:
    metrics: dict[str, float]
    raw: dict = field(default_factory=dict)


class PromptBook:
    """Long prompts, sized once per seed with /tokenize on one server (the
    reference), then sent verbatim to both; each server's own count is checked."""

    def __init__(self, sizing_url: str) -> None:
        self.sizing_url = sizing_url
        self._texts: dict[str, str] = {}

    async def long(self, client: httpx.AsyncClient, url: str, seed: str) -> tuple[str, int]:
        if seed not in self._texts:
            self._texts[seed], _ = await long_prompt(client, self.sizing_url, seed,
                                                     LONG_PROMPT_TOKENS)
        text = self._texts[seed]
        return text, await tokenize(client, url, text)


def percentile(values: list[float], q: float) -> float:
    """q in [0, 100], linear interpolation between closest ranks."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _stream_raw(r: StreamResult) -> dict:
    return {"n_tokens": r.n_tokens, "ttft_s": r.ttft, "latency_s": r.latency,
            "tokens_evaluated": r.tokens_evaluated, "timings": r.timings}


# `cache_prompt` of the rows that decode short prompts (decode, chat_decode, aggregate4,
# latency16); run.py --cache-prompt sends the servers' default, true. The rows with long
# prompts keep false: their prompts share long prefixes from round to round.
SHORT_PROMPT_CACHE = {"cache_prompt": False}


async def decode(client: httpx.AsyncClient, url: str, rnd: int, book: PromptBook) -> Measurement:
    """One stream, short prompt, 128 tokens: decode speed first to last token."""
    r = await stream_completion(client, url, short_prompt(f"decode-{rnd}"), n_predict=128,
                                cache_prompt=SHORT_PROMPT_CACHE["cache_prompt"])
    metrics = {"decode_tps": r.decode_tps()}
    if "predicted_per_second" in r.timings:
        metrics["server_decode_tps"] = float(r.timings["predicted_per_second"])
    return Measurement(metrics, _stream_raw(r))


async def chat_decode(client: httpx.AsyncClient, url: str, rnd: int, book: PromptBook) -> Measurement:
    """One chat stream with temperature 0.7, top_p 0.9, top_k 40, min_p 0.05, repeat
    penalty 1.1, 128 tokens: decode speed first to last content chunk."""
    r = await stream_chat(client, url, short_prompt(f"chat-{rnd}"), max_tokens=128, seed=1000 + rnd,
                          cache_prompt=SHORT_PROMPT_CACHE["cache_prompt"])
    return Measurement({"chat_decode_tps": r.decode_tps()}, _stream_raw(r))


async def prefill(client: httpx.AsyncClient, url: str, rnd: int, book: PromptBook) -> Measurement:
    """A ~1,000-token prompt, one token out, no cache: prompt tokens / TTFT."""
    text, n_tok = await book.long(client, url, f"prefill-{rnd}")
    r = await stream_completion(client, url, text, n_predict=1)
    n_prompt = r.tokens_evaluated or n_tok
    metrics = {"prompt_tps": n_prompt / r.ttft, "ttft_s": r.ttft, "prompt_tokens": n_prompt}
    if "prompt_per_second" in r.timings:
        metrics["server_prompt_tps"] = float(r.timings["prompt_per_second"])
    raw = _stream_raw(r) | {"prompt_tokens_tokenize": n_tok,
                            "cache_n": r.timings.get("cache_n")}
    return Measurement(metrics, raw)


async def _concurrent(client: httpx.AsyncClient, url: str, seeds: list[str],
                      n_predict: int) -> tuple[list[StreamResult], float]:
    t0 = time.perf_counter()
    results = await asyncio.gather(*(stream_completion(client, url, short_prompt(s), n_predict,
                                                       cache_prompt=SHORT_PROMPT_CACHE["cache_prompt"])
                                     for s in seeds))
    return list(results), time.perf_counter() - t0


async def aggregate4(client: httpx.AsyncClient, url: str, rnd: int, book: PromptBook) -> Measurement:
    """4 concurrent streams of 128 tokens: total tokens / wall time."""
    results, wall = await _concurrent(client, url, [f"agg-{rnd}-{i}" for i in range(4)], 128)
    total = sum(r.n_tokens for r in results)
    return Measurement({"aggregate_tps": total / wall},
                       {"wall_s": wall, "streams": [_stream_raw(r) for r in results]})


async def latency16(client: httpx.AsyncClient, url: str, rnd: int, book: PromptBook) -> Measurement:
    """16 concurrent requests of 64 tokens on the server's slots: latency spread."""
    results, wall = await _concurrent(client, url, [f"lat-{rnd}-{i}" for i in range(16)], 64)
    lat = [r.latency for r in results]
    ttft = [r.ttft for r in results]
    metrics = {"p50_latency_s": percentile(lat, 50), "p95_latency_s": percentile(lat, 95),
               "p50_ttft_s": percentile(ttft, 50),
               "aggregate_tps": sum(r.n_tokens for r in results) / wall}
    return Measurement(metrics, {"wall_s": wall, "streams": [_stream_raw(r) for r in results]})


async def gap(client: httpx.AsyncClient, url: str, rnd: int, book: PromptBook) -> Measurement:
    """A running stream (256 tokens); after ~20 tokens a 1,000-token prompt arrives.

    Compares the stream's largest inter-token gap while that prompt is prefilled
    (send -> its first token) with its median gap before. Without chunked
    prefill the stream stalls for the whole prefill.
    """
    text, n_tok = await book.long(client, url, f"gap-{rnd}")
    started = asyncio.Event()

    def on_tokens(n: int) -> None:
        if n >= 20:
            started.set()

    running = asyncio.create_task(stream_completion(
        client, url, short_prompt(f"gap-{rnd}"), n_predict=256, on_tokens=on_tokens))
    waiter = asyncio.create_task(started.wait())
    try:
        await asyncio.wait({running, waiter}, timeout=300,
                           return_when=asyncio.FIRST_COMPLETED)
        if not started.is_set():
            if running.done():
                running.result()                    # re-raise its error, if any
            raise RuntimeError("gap: the running stream did not reach 20 tokens")
        t_long = time.perf_counter()
        long_r = await stream_completion(client, url, text, n_predict=1)
        t_prefilled = long_r.chunk_times[0]
        run_r = await running
    finally:
        for task in (running, waiter):
            task.cancel()

    gaps = run_r.gaps()
    before = [e - s for s, e in gaps if e <= t_long]
    during = [e - s for s, e in gaps if e > t_long and s < t_prefilled]
    if not before or not during:
        raise RuntimeError("gap: the running stream had no gaps before/during the prefill")
    metrics = {"median_gap_before_ms": statistics.median(before) * 1000,
               "max_gap_during_ms": max(during) * 1000,
               "long_ttft_s": long_r.ttft}
    metrics["stall_x"] = metrics["max_gap_during_ms"] / metrics["median_gap_before_ms"]
    raw = {"running": _stream_raw(run_r), "long": _stream_raw(long_r),
           "long_prompt_tokens_tokenize": n_tok, "gaps_during_ms": [g * 1000 for g in during]}
    return Measurement(metrics, raw)


ScenarioFn = Callable[[httpx.AsyncClient, str, int, PromptBook], Awaitable[Measurement]]

SCENARIOS: dict[str, ScenarioFn] = {
    "decode": decode,
    "chat_decode": chat_decode,
    "prefill": prefill,
    "aggregate4": aggregate4,
    "latency16": latency16,
    "gap": gap,
}

# (scenario, metric) -> (comparison, bound) on the ratio mlxcel / llama-server
TARGETS: dict[tuple[str, str], tuple[str, float]] = {
    ("decode", "decode_tps"): (">=", 1.0),
    ("chat_decode", "chat_decode_tps"): (">=", 1.0),
    ("prefill", "prompt_tps"): (">=", 1.0),
    ("aggregate4", "aggregate_tps"): (">=", 1.0),
    ("latency16", "p95_latency_s"): ("<=", 1.0),
}
