"""/v1/models with many models (--config): one entry per configured id and one per
alias (`alias_of`), each with 003's markers (resident, pinned, speculative, vlm,
profile, default) and its two context figures."""

from __future__ import annotations

from mlxcel.engine.projector import projector_caps
from mlxcel.fleet.capacity import max_context_at_width_1 as table_width_1
from mlxcel.fleet.footprint import estimate_footprint
from mlxcel.fleet.monitor import ServerMonitor
from mlxcel.fleet.residency import Fleet, spec_type_of
from mlxcel.turn.model_host import ModelHost

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


def max_context_at_width_1(monitor: ServerMonitor, host: ModelHost | None) -> int | None:
    """How much of the window one stream can use in memory: from the model's capacity
    table, so null for a model that is not resident (no table yet)."""
    if host is None or not host.ready:
        return None
    return table_width_1(monitor.table(host))


def _modalities(mmproj: str | None) -> dict[str, bool]:
    """What a configured projector takes, from its file's header (the model need not be loaded)."""
    vision, audio = projector_caps(mmproj) if mmproj is not None else (False, False)
    return {"vision": vision, "video": vision, "audio": audio}


def _entry(fleet: Fleet, monitor: ServerMonitor, model_id: str, profile: str | None, created: int) -> dict:
    entry = fleet.config.models[model_id]
    resident = fleet.resident(model_id)
    modalities = _modalities(entry.mmproj)  # read from the projector's header once
    return {
        "id": model_id, "object": "model", "created": created, "owned_by": OWNER,
        "resident": resident is not None and resident.ready,
        "pinned": model_id in fleet.pinned,
        "kept": resident is not None and resident.kept,
        # whether its engine drafts: the server's --spec-type (prompt lookup by default) unless the entry names one
        "speculative": spec_type_of(fleet.base, entry) != "none",
        "vlm": entry.mmproj is not None,  # a projector is configured (images and/or audio)
        "modalities": modalities,
        "profile": profile,
        "default": model_id == fleet.default_id,
        "context_length": _context_length(fleet, model_id),
        "max_context_at_width_1": max_context_at_width_1(monitor, resident.host if resident is not None else None),
        "status": _status(fleet, model_id),
        # llama-server's router fields: its aliases, and what it takes in (agents read these)
        "aliases": sorted(a for a, target in fleet.config.aliases.items() if target.partition("@")[0] == model_id),
        "architecture": {"input_modalities": _input_modalities(modalities), "output_modalities": ["text"]},
        "source": fleet.config.sources.get(model_id, "preset"),
        "can_remove": False,  # only a model in llama-server's download cache can be removed (DELETE /models)
    }


def _input_modalities(modalities: dict[str, bool]) -> list[str]:
    return ["text", *(["image"] if modalities["vision"] else []), *(["audio"] if modalities["audio"] else [])]


def _status(fleet: Fleet, model_id: str) -> dict:
    """llama-server's router status: loaded, loading, sleeping or unloaded, and whether the last load failed."""
    status = {"value": fleet.status(model_id)}
    if status["value"] == "unloaded" and model_id in fleet.failures:
        status.update(failed=True, exit_code=1)
    return status


def fleet_listing(fleet: Fleet, monitor: ServerMonitor) -> list[dict]:
    config = fleet.config
    created = int(config.path.stat().st_mtime) if config.path.exists() else 0
    rows = [_entry(fleet, monitor, model_id, config.models[model_id].profile, created)
            for model_id in sorted(config.models)]
    for alias in sorted(config.aliases):
        target = config.aliases[alias]
        model_id, _, profile = target.partition("@")
        row = _entry(fleet, monitor, model_id, profile or config.models[model_id].profile, created)
        rows.append({**row, "id": alias, "alias_of": target, "default": False, "aliases": []})
    return rows
