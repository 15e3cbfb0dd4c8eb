"""The boot capacity table of one model, and the capacity plan that reads it
(GET /v1/capacity/plan, /v1/models' max_context_at_width_1).

The table. From the model's KV bytes per token, its weights (llama_model_size), the
transient compute bytes and the memory the model may use (its share of the budget, or
the host's available memory):

    kv_budget_bytes  = memory_bytes - weights_bytes - compute_bytes
    kv_tokens        = kv_budget_bytes // kv_bytes_per_token      (all streams together)
    max_ctx[W]       = min(kv_tokens // W, slot_ctx, n_ctx_train)
    max_width_at_depth[D] = the largest tabulated W <= decode_batch whose max_ctx[W] >= D (0: none)

llama.cpp gives each of the n_parallel sequences its own n_ctx / n_parallel cells
(kv_unified off), so no stream can grow past the slot context whatever the memory,
and no more than `decode_batch` streams run at once: both cap the table.
Widths: 1, 2, 4, 8, 16, 32 up to the decode width, plus the decode width itself.
Depths: 1024, 4096, 8192, 16384, 32768, then doubling, up to n_ctx_train (which is
tabulated too when it falls between).

The plan. `plan(table, W, D, ...)` as 003 defines it:
- ok: the table read conservatively at the smallest tabulated width >= W holds D
  tokens per stream (a width past the decode width is not tabulated: false). None
  without a table or with MLXCEL_OVERCOMMIT=1: then only the timing is judged.
- admit_now: ok is not false, the governor is below orange, nothing is waiting, and
  at least W decode slots are free (under a yellow band at most one counts as free).
- reason: the first failing condition, in that order, else "ok"."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

OVERCOMMIT_ENV = "MLXCEL_OVERCOMMIT"
WIDTHS = (1, 2, 4, 8, 16, 32)
DEPTHS = (1024, 4096, 8192, 16384, 32768)


def overcommit() -> bool:
    return os.environ.get(OVERCOMMIT_ENV, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class CapacityTable:
    model: str
    kv_bytes_per_token: int
    weights_bytes: int
    compute_bytes: int
    memory_bytes: int
    decode_batch: int  # slots: streams that can run at once
    slot_ctx: int  # tokens one slot's sequence can hold
    n_ctx_train: int
    max_ctx: dict[int, int] = field(default_factory=dict)  # width -> tokens per stream
    max_width_at_depth: dict[int, int] = field(default_factory=dict)  # depth -> streams

    @property
    def kv_budget_bytes(self) -> int:
        return max(0, self.memory_bytes - self.weights_bytes - self.compute_bytes)

    @property
    def kv_tokens(self) -> int:
        return self.kv_budget_bytes // self.kv_bytes_per_token if self.kv_bytes_per_token > 0 else 0

    def width_at_or_above(self, width: int) -> int | None:
        """The smallest tabulated width >= `width` (the conservative read), None past the table."""
        return next((w for w in sorted(self.max_ctx) if w >= width), None)

    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "decode_batch": self.decode_batch,
            "slot_ctx": self.slot_ctx,
            "n_ctx_train": self.n_ctx_train,
            "max_ctx": {str(w): n for w, n in self.max_ctx.items()},
            "max_width_at_depth": {str(d): w for d, w in self.max_width_at_depth.items()},
            "bytes": {
                "memory": self.memory_bytes,
                "weights": self.weights_bytes,
                "compute": self.compute_bytes,
                "kv_budget": self.kv_budget_bytes,
                "kv_per_token": self.kv_bytes_per_token,
                "kv_slots": self.kv_bytes_per_token * self.slot_ctx * self.decode_batch,
            },
        }


def widths_for(decode_batch: int) -> list[int]:
    return sorted({w for w in WIDTHS if w <= decode_batch} | {max(1, decode_batch)})


def depths_for(n_ctx_train: int) -> list[int]:
    depths = []
    candidates = list(DEPTHS)
    while candidates[-1] < n_ctx_train:
        candidates.append(candidates[-1] * 2)
    for depth in candidates:
        if depth <= n_ctx_train:
            depths.append(depth)
    if n_ctx_train > 0 and n_ctx_train not in depths:
        depths.append(n_ctx_train)
    return depths


def build_table(model: str, *, kv_bytes_per_token: int, weights_bytes: int, compute_bytes: int, memory_bytes: int,
                decode_batch: int, slot_ctx: int, n_ctx_train: int) -> CapacityTable:
    """The table of one model; kv_bytes_per_token must be positive."""
    if kv_bytes_per_token <= 0:
        raise ValueError("kv_bytes_per_token must be positive")
    table = CapacityTable(model, kv_bytes_per_token, weights_bytes, compute_bytes, memory_bytes,
                          max(1, decode_batch), slot_ctx, n_ctx_train)
    limit = min(slot_ctx, n_ctx_train) if n_ctx_train > 0 else slot_ctx
    for width in widths_for(table.decode_batch):
        table.max_ctx[width] = max(0, min(table.kv_tokens // width, limit))
    for depth in depths_for(n_ctx_train or slot_ctx):
        table.max_width_at_depth[depth] = max((w for w, n in table.max_ctx.items() if n >= depth), default=0)
    return table


def max_context_at_width_1(table: CapacityTable | None) -> int | None:
    """/v1/models' figure: null without a table or under MLXCEL_OVERCOMMIT=1."""
    if table is None or overcommit():
        return None
    return table.max_ctx.get(1)


@dataclass(frozen=True)
class Plan:
    width: int
    depth: int
    ok: bool | None
    admit_now: bool
    reason: str
    max_context_at_width: int | None = None
    max_width_at_depth: int | None = None
    band: str | None = None
    free_slots: int = 0
    waiting: int = 0

    def to_dict(self) -> dict:
        return {
            "width": self.width, "depth": self.depth, "ok": self.ok,
            "max_context_at_width": self.max_context_at_width, "max_width_at_depth": self.max_width_at_depth,
            "band": self.band, "waiting": self.waiting, "slots": self.free_slots,
            "admit_now": self.admit_now, "reason": self.reason,
        }


def plan(table: CapacityTable | None, width: int, depth: int, free_slots: int, waiting: int,
         band: str = "green", decode_batch: int | None = None, overcommitted: bool | None = None) -> Plan:
    """Whether `width` streams of `depth` tokens fit (`ok`) and may start now
    (`admit_now`). `band`: the governor's effective band; `decode_batch`: the slot
    count for the reason text (the table's when None). Raises ValueError for a width
    or depth below 1."""
    if width < 1 or depth < 1:
        raise ValueError("width and depth must be positive integers")
    band = getattr(band, "value", band)
    slots = decode_batch if decode_batch is not None else (table.decode_batch if table is not None else free_slots)
    overcommitted = overcommit() if overcommitted is None else overcommitted
    reasons: list[str] = []
    ok: bool | None = None
    at_width = at_depth = None
    if table is not None and not overcommitted:
        tabulated = table.width_at_or_above(width)
        at_depth = max((w for w, n in table.max_ctx.items() if n >= depth), default=0)
        if tabulated is None:
            ok = False
            reasons.append(f"width {width} exceeds the decode width {table.decode_batch}")
        else:
            at_width = table.max_ctx[tabulated]
            ok = depth <= at_width
            if not ok:
                reasons.append(f"depth {depth} exceeds max context {at_width} at width {width}")
    if band in ("orange", "red"):
        reasons.append(f"governor {band}")
    if waiting > 0:
        reasons.append(f"{waiting} waiting for a slot")
    free = min(free_slots, 1) if band == "yellow" else free_slots
    if free < width:
        note = " (governor yellow counts one)" if band == "yellow" and free_slots > 1 else ""
        reasons.append(f"{free} free slot(s) of {slots}, need {width}{note}")
    return Plan(width, depth, ok, not reasons, reasons[0] if reasons else "ok", at_width, at_depth, band,
                free_slots, waiting)
