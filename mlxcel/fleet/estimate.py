"""The admission estimate of one request (POST /v1/estimate, "dry_run": true), the two
"does not fit" messages, and the drain estimate that Retry-After carries. Pure
functions over numbers the caller measured; nothing here loads or runs a model.

    need_bytes   = prefill_transient_bytes + kv_bytes_per_token x (prompt_tokens + max_tokens)
                   (max_tokens only when the body sets it)
    fits_now     = need_bytes <= free_bytes        (memory free for it now)
    fits_drained = need_bytes <= drained_bytes     (free once running requests finish: the free
                                                    bytes plus the KV bytes the running requests hold)
    context_ok   = prompt_tokens + max_tokens <= context_limit   (the slot's context)
    est_ttft_s   = queue_wait_s + (prompt_tokens - warm_tokens) / prefill_tok_s
                   (null until a prefill rate has been measured)

cache_tier says where the longest reusable prefix lies, the routing signal between
replicas: "slot" (a slot's sequence holds it: nothing to copy), "exact" or "block"
(the host-RAM prompt cache holds the whole prompt, or a block-aligned prefix of it:
it is restored from there), "hit" (reused tokens known but not where), "miss"
(nothing reusable). 003's ckpt and anchor tiers have no counterpart here.

queue_wait_s: how long a request sent now waits for a slot. With `ahead` = waiting -
free_slots + 1 requests to finish before it starts (none: 0 s),

    wait = ahead x mean_generated / (decode_tok_s x max(in_flight, 1))

with decode_tok_s one stream's recent decode rate and mean_generated the recent mean
output length (DEFAULT_ETA_S a request while nothing has been measured).

drain_eta_s (mlxcel.engine.drain, re-exported): the seconds until the waiting
requests have all started, which is when a request rejected at the queue cap would
find room: the same formula with `ahead` = waiting, clamped to 2..60 s."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mlxcel.engine.drain import DEFAULT_ETA_S, ETA_MAX_S, ETA_MIN_S, drain_eta_s, finishing_time

TOO_LONG = "prompt is too long"
__all__ = ["DEFAULT_ETA_S", "ETA_MAX_S", "ETA_MIN_S", "drain_eta_s", "estimate", "queue_wait_s", "warm_prefix"]
CACHE_TIERS = ("slot", "exact", "block", "hit", "miss")


def need_bytes(prompt_tokens: int, max_tokens: int | None, kv_bytes_per_token: int,
               prefill_transient_bytes: int = 0) -> int:
    return prefill_transient_bytes + kv_bytes_per_token * (prompt_tokens + max(0, max_tokens or 0))


def estimate(*, prompt_tokens: int, warm_tokens: int = 0, cache_tier: str = "miss", max_tokens: int | None = None,
             kv_bytes_per_token: int | None, prefill_transient_bytes: int = 0, context_limit: int | None,
             free_bytes: int | None, drained_bytes: int | None, prefill_tok_s: float | None = None,
             queue_wait_s: float = 0.0, resident: bool = True) -> dict:
    """003's estimate fields; any input that is unknown (None) leaves the fields it
    feeds null."""
    warm_tokens = max(0, min(warm_tokens, prompt_tokens))
    need = need_bytes(prompt_tokens, max_tokens, kv_bytes_per_token, prefill_transient_bytes) \
        if kv_bytes_per_token is not None else None
    total = prompt_tokens + max(0, max_tokens or 0)
    ttft = None
    if prefill_tok_s is not None and prefill_tok_s > 0:
        ttft = round(max(0.0, queue_wait_s) + (prompt_tokens - warm_tokens) / prefill_tok_s, 3)
    return {
        "prompt_tokens": prompt_tokens,
        "warm_tokens": warm_tokens,
        "cache_tier": cache_tier if warm_tokens or cache_tier == "miss" else "miss",
        "max_tokens": max_tokens,
        "need_bytes": need,
        "fits_now": None if need is None or free_bytes is None else need <= free_bytes,
        "fits_drained": None if need is None or drained_bytes is None else need <= drained_bytes,
        "context_ok": None if context_limit is None else total <= context_limit,
        "context_limit": context_limit,
        "est_ttft_s": ttft,
        "resident": resident,
    }


def context_too_long(prompt_tokens: int, max_tokens: int | None, context_limit: int) -> str:
    """The 400 for a prompt (plus max_tokens) past the context budget."""
    asked = f"{prompt_tokens} prompt tokens"
    if max_tokens:
        asked += f" + {max_tokens} max_tokens = {prompt_tokens + max_tokens} tokens"
    return (f"{TOO_LONG}: the request needs {asked}, which exceeds the context window "
            f"of {context_limit} tokens")


def memory_too_long(need: int, available: int) -> str:
    """The 400 for a prompt that cannot fit in memory."""
    return (f"{TOO_LONG}: it needs an estimated {need} bytes ({need / 2**30:.2f} GiB) of memory, "
            f"and {available} bytes ({available / 2**30:.2f} GiB) are available")


def queue_wait_s(waiting: int, free_slots: int, in_flight: int, decode_tok_s: float | None,
                 mean_generated: float | None) -> float:
    return round(finishing_time(waiting - free_slots + 1, in_flight, decode_tok_s, mean_generated), 3)


def warm_prefix(prompt: Sequence[int], slot_tokens: Iterable[Sequence[int]], host_covered: int = 0,
                block_size: int = 16) -> tuple[int, str]:
    """(warm_tokens, cache_tier) of `prompt`: the longest prefix a slot's sequence holds
    ("slot"), else the prefix the host prompt cache covers (`host_covered`, e.g.
    HostPromptCache.covered(prompt)): "exact" when it reaches the prompt's last whole
    block, else "block"; "miss" when neither holds any. As admission does, the last
    prompt token is never counted warm (its logits must be computed)."""
    limit = max(0, len(prompt) - 1)
    in_slot = max((_common(tokens, prompt) for tokens in slot_tokens), default=0)
    in_slot, host_covered = min(in_slot, limit), min(max(0, host_covered), limit)
    if in_slot and in_slot >= host_covered:
        return in_slot, "slot"
    if host_covered:
        return host_covered, "exact" if host_covered >= len(prompt) // block_size * block_size else "block"
    return 0, "miss"


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
