"""One numbering of every replica's slots, so that llama-server's slot routes speak
for the whole cluster: `GET /slots` lists the replicas' slots one after another
(replicas in the order of their ids), and `POST /slots/{id}` acts on the slot that
number names. Replica r's slot s is numbered the slots of the replicas before r, plus
s. Each row also names its replica and its number there (`replica`, `replica_slot`).

The numbering holds while the set of replicas does: a replica added or replaced by
autoscaling or a restart renumbers the slots after it (`GET /slots` shows the current
numbers)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SlotPlace:
    replica: str
    slot: int  # the slot's number within its replica


def merged_rows(answers: dict[str, list]) -> list[dict]:
    """Every replica's `/slots` rows (replica id -> its list), renumbered as above; the
    requests waiting in each replica's queue (its rows after its slots) come after every
    slot, numbered on, with no `replica_slot`."""
    rows, waiting, offset = [], [], 0
    for replica in sorted(answers):
        slots = [row for row in answers[replica] if not _waiting(row)]
        for row in slots:
            if isinstance(row, dict) and isinstance(row.get("id"), int):
                rows.append({**row, "id": offset + row["id"], "replica": replica, "replica_slot": row["id"]})
        waiting += [{**row, "replica": replica, "replica_slot": None} for row in answers[replica] if _waiting(row)]
        offset += len(slots)
    return rows + [{**row, "id": offset + i} for i, row in enumerate(waiting)]


def _waiting(row) -> bool:
    """A queued request's row, not a slot's (a slot prefilling is `queued` but processing)."""
    return isinstance(row, dict) and row.get("state") == "queued" and row.get("is_processing") is False


def locate(slot_id: int, counts: dict[str, int]) -> SlotPlace | None:
    """The replica and local slot that `slot_id` numbers, given each replica's slot
    count; None when no slot has that number."""
    if slot_id < 0:
        return None
    for replica in sorted(counts):
        if slot_id < counts[replica]:
            return SlotPlace(replica, slot_id)
        slot_id -= counts[replica]
    return None
