"""Streaming POST /completion client (llama-server's native API) with timing.

The streams are read by sse_stream.post_events (a connection per request, the framing
read by hand): httpx's streaming cost the client 0.40 ms of CPU a token, taken from the
servers' cores. `client` stays in the signatures for the calls that are not streamed."""
from __future__ import annotations

import asyncio
import json
import sys
import time
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Callable

import httpx
from sse_stream import post_events

REQUEST_TIMEOUT_S = 600.0        # whole request, first byte to final chunk
CHUNK_TIMEOUT_S = 300.0          # longest silence between two SSE lines


def make_client(max_connections: int = 32) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        trust_env=False,         # loopback only: never go through a proxy
        timeout=httpx.Timeout(CHUNK_TIMEOUT_S, connect=10.0),
        limits=httpx.Limits(max_connections=max_connections,
                            max_keepalive_connections=max_connections))


@dataclass
class StreamResult:
    t_sent: float                                  # perf_counter() when sent
    t_done: float = 0.0                            # final chunk received
    chunk_times: list[float] = field(default_factory=list)   # one per token chunk
    chunk_tokens: list[int] = field(default_factory=list)    # tokens in that chunk
    timings: dict = field(default_factory=dict)   # server's `timings`, if any
    tokens_evaluated: int | None = None            # prompt tokens, per the server
    tokens_predicted: int | None = None
    t_admitted: float | None = None                # first `prompt_progress` chunk: a slot took it

    @property
    def n_tokens(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def ttft(self) -> float:
        return self.chunk_times[0] - self.t_sent

    @property
    def latency(self) -> float:
        return self.t_done - self.t_sent

    def decode_tps(self) -> float:
        """Tokens after the first chunk over the time from first to last chunk."""
        span = self.chunk_times[-1] - self.chunk_times[0]
        return (self.n_tokens - self.chunk_tokens[0]) / span if span > 0 else float("nan")

    def gaps(self) -> list[tuple[float, float]]:
        """(start, end) of each interval between consecutive token chunks."""
        return list(zip(self.chunk_times, self.chunk_times[1:]))


def _count_tokens(chunk: dict) -> int:
    tokens = chunk.get("tokens")
    if isinstance(tokens, list) and tokens:
        return len(tokens)
    return 1 if chunk.get("content") else 0


async def stream_completion(client: httpx.AsyncClient, url: str, prompt: str,
                            n_predict: int, cache_prompt: bool = False,
                            on_tokens: Callable[[int], None] | None = None,
                            headers: dict[str, str] | None = None,
                            return_progress: bool = False) -> StreamResult:
    """Send one streaming /completion; `on_tokens(total_so_far)` after each chunk.
    With `return_progress`, the first `prompt_progress` chunk (sent when a slot takes
    the request, on both servers) sets `t_admitted`; progress chunks count no tokens."""
    body = {"prompt": prompt, "n_predict": n_predict, "temperature": 0,
            "ignore_eos": True, "cache_prompt": cache_prompt, "stream": True}
    if return_progress:
        body["return_progress"] = True
    result = StreamResult(t_sent=time.perf_counter())

    async def consume() -> None:
        async with aclosing(post_events(url, "/completion", body, headers)) as events:
            async for now, payload in events:
                if payload == b"[DONE]":
                    break
                chunk = json.loads(payload)
                if "error" in chunk:
                    raise RuntimeError(f"/completion stream error: {chunk['error']}")
                if "prompt_progress" in chunk:
                    if result.t_admitted is None:
                        result.t_admitted = now
                    continue
                n = _count_tokens(chunk)
                if n:
                    result.chunk_times.append(now)
                    result.chunk_tokens.append(n)
                    if on_tokens:
                        on_tokens(result.n_tokens)
                if chunk.get("stop"):
                    result.t_done = now
                    result.timings = chunk.get("timings") or {}
                    result.tokens_evaluated = chunk.get("tokens_evaluated")
                    result.tokens_predicted = chunk.get("tokens_predicted")
                    break

    await asyncio.wait_for(consume(), REQUEST_TIMEOUT_S)
    if not result.t_done:
        raise RuntimeError("/completion stream ended without a final `stop` chunk")
    if not result.chunk_times:
        raise RuntimeError("/completion stream produced no tokens")
    if result.n_tokens != n_predict:
        print(f"warning: asked for {n_predict} tokens (ignore_eos), got {result.n_tokens}",
              file=sys.stderr, flush=True)
    return result


async def tokenize(client: httpx.AsyncClient, url: str, text: str) -> int:
    """Number of tokens of `text` per the server's POST /tokenize (no BOS)."""
    resp = await client.post(f"{url}/tokenize", json={"content": text}, timeout=60)
    resp.raise_for_status()
    return len(resp.json()["tokens"])


CHAT_SAMPLING = {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1}


async def stream_chat(client: httpx.AsyncClient, url: str, content: str, max_tokens: int,
                      seed: int, cache_prompt: bool = False) -> StreamResult:
    """One streaming /v1/chat/completions with a typical sampling chain; every
    content chunk is one token on both servers (usage gives the exact count)."""
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "cache_prompt": cache_prompt, "seed": seed, "stream_options": {"include_usage": True},
            **CHAT_SAMPLING}
    result = StreamResult(t_sent=time.perf_counter())

    async def consume() -> None:
        async with aclosing(post_events(url, "/v1/chat/completions", body)) as events:
            async for now, payload in events:
                if payload == b"[DONE]":
                    result.t_done = now
                    break
                chunk = json.loads(payload)
                if chunk.get("usage"):
                    result.tokens_predicted = chunk["usage"].get("completion_tokens")
                    result.tokens_evaluated = chunk["usage"].get("prompt_tokens")
                for choice in chunk.get("choices") or []:
                    if (choice.get("delta") or {}).get("content"):
                        result.chunk_times.append(now)
                        result.chunk_tokens.append(1)

    await asyncio.wait_for(consume(), REQUEST_TIMEOUT_S)
    if not result.chunk_times:
        raise RuntimeError("/v1/chat/completions stream produced no content")
    return result
