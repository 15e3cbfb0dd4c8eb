"""Rates of one model's engine, from what its snapshot publishes (no state here):

- decode_tok_s: the aggregate decode rate now, the sum over the decoding requests of
  (generated - 1) / (now - first token); decode_streams: how many there are. (A
  request's first token comes out of its prefill and costs no decode step.)
- prefill_tok_s_recent: over the last 8 finished requests (EngineStats.recent), the
  prompt tokens they decoded over their prefill seconds (a token-weighted mean; a
  request served wholly from the cache adds no tokens and its tiny prefill time).
- decode_tok_s_recent: over the same requests, (generated - 1) over decode seconds,
  token-weighted: one stream's rate, as a client sees it.
- decode_tok_s_lifetime: the same over every request since the engine started
  (llama-server's predicted steps over predicted seconds).
- mean_generated_recent: the mean output length of those requests (the drain estimate
  uses it).

A rate with nothing measured is None. `combine` sums the "now" figures over models and
pools the recent and lifetime tokens and seconds."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from mlxcel.engine.slots import SlotState
from mlxcel.engine.snapshot import EngineSnapshot


@dataclass(frozen=True)
class Rates:
    decode_tok_s: float
    decode_streams: int
    prefill_tok_s_recent: float | None
    decode_tok_s_recent: float | None
    decode_tok_s_lifetime: float | None
    mean_generated_recent: float | None
    # the sums behind the means (combine pools them)
    recent_prefill: tuple[int, float] = (0, 0.0)
    recent_decode: tuple[int, float] = (0, 0.0)
    lifetime_decode: tuple[int, float] = (0, 0.0)
    recent_generated: tuple[int, int] = (0, 0)  # (tokens, requests)

    def to_dict(self) -> dict:
        data = asdict(self)
        for key in ("recent_prefill", "recent_decode", "lifetime_decode", "recent_generated"):
            data.pop(key)
        return data


def _ratio(tokens: float, seconds: float) -> float | None:
    return round(tokens / seconds, 2) if tokens > 0 and seconds > 0 else None


def rates_of(snapshot: EngineSnapshot, now: float | None = None) -> Rates:
    """`now`: a time.monotonic() reading (the snapshot's own time when None)."""
    now = snapshot.taken_at if now is None else now
    streams, aggregate = 0, 0.0
    for slot in snapshot.slots:
        if slot.state is SlotState.DECODE and slot.first_token_at > 0:
            streams += 1
            elapsed = now - slot.first_token_at
            if slot.n_decoded > 1 and elapsed > 0:
                aggregate += (slot.n_decoded - 1) / elapsed
    recent = snapshot.stats.recent
    prefill = (sum(r.prefill_tokens for r in recent), sum(r.prefill_seconds for r in recent))
    decode = (sum(r.generated - 1 for r in recent), sum(r.decode_seconds for r in recent))
    lifetime = (snapshot.stats.predicted_steps, snapshot.stats.predicted_seconds)
    generated = (sum(r.generated for r in recent), len(recent))
    return _rates(round(aggregate, 2), streams, prefill, decode, lifetime, generated)


def _rates(aggregate: float, streams: int, prefill, decode, lifetime, generated) -> Rates:
    return Rates(
        decode_tok_s=aggregate,
        decode_streams=streams,
        prefill_tok_s_recent=_ratio(*prefill),
        decode_tok_s_recent=_ratio(*decode),
        decode_tok_s_lifetime=_ratio(*lifetime),
        mean_generated_recent=round(generated[0] / generated[1], 2) if generated[1] else None,
        recent_prefill=prefill,
        recent_decode=decode,
        lifetime_decode=lifetime,
        recent_generated=generated,
    )


def combine(rates: Iterable[Rates]) -> Rates:
    rates = list(rates)

    def pooled(name: str) -> tuple:
        return tuple(sum(getattr(r, name)[i] for r in rates) for i in range(2))

    return _rates(round(sum(r.decode_tok_s for r in rates), 2), sum(r.decode_streams for r in rates),
                  pooled("recent_prefill"), pooled("recent_decode"), pooled("lifetime_decode"),
                  pooled("recent_generated"))
