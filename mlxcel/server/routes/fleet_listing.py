"""/v1/models with many models (--config): one entry per configured id and one per
alias (`alias_of`), each with 003's markers (resident, pinned, speculative, vlm,
profile, default) and its two context figures."""

from __future__ import annotations

from mlxcel.fleet.footprint import estimate_footprint
from mlxcel.fleet.residency import Fleet

OWNER = "mlxcel"


def _context_length(fleet: Fleet, model_id: str) -> int | None:
    """The window one request may use: the slot's share of the context, within the trained window."""
    entry = fleet.config.models[model_id]
    resident = fleet.resident(model_id)
    if resident is not None and resident.ready and resident.host.runtime is not None:
        return resident.host.slot_context
    footprint = estimate_footprint(entry, fleet.base)
    slots = entry.load.parallel or fleet.base.parallel
    if not footprint.n_ctx:
        return None
    per_slot = footprint.n_ctx // max(1, slots)
    return min(per_slot, footprint.n_ctx_train) if footprint.n_ctx_train else per_slot


def _entry(fleet: Fleet, model_id: str, profile: str | None, created: int) -> dict:
    entry = fleet.config.models[model_id]
    resident = fleet.resident(model_id)
    capacity = getattr(fleet, "capacity_for", None)
    return {
        "id": model_id, "object": "model", "created": created, "owned_by": OWNER,
        "resident": resident is not None and resident.ready,
        "pinned": model_id in fleet.pinned,
        "kept": resident is not None and resident.kept,
        "speculative": entry.speculative or entry.draft is not None,
        "vlm": False,
        "profile": profile,
        "default": model_id == fleet.default_id,
        "context_length": _context_length(fleet, model_id),
        "max_context_at_width_1": capacity(model_id) if capacity is not None else None,
    }


def fleet_listing(fleet: Fleet) -> list[dict]:
    config = fleet.config
    created = int(config.path.stat().st_mtime) if config.path.exists() else 0
    rows = [_entry(fleet, model_id, config.models[model_id].profile, created) for model_id in sorted(config.models)]
    for alias in sorted(config.aliases):
        target = config.aliases[alias]
        model_id, _, profile = target.partition("@")
        row = _entry(fleet, model_id, profile or config.models[model_id].profile, created)
        rows.append({**row, "id": alias, "alias_of": target, "default": False})
    return rows
