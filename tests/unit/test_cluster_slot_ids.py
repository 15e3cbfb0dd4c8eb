"""The cluster's one numbering of every replica's slots (mlxcel/cluster/slot_ids.py)."""

from mlxcel.cluster.slot_ids import SlotPlace, locate, merged_rows


def test_rows_are_numbered_replica_after_replica_in_id_order():
    rows = merged_rows({"b": [{"id": 0, "n_cached": 5}, {"id": 1}], "a": [{"id": 0}, {"id": 1}, {"id": 2}]})
    assert [(r["id"], r["replica"], r["replica_slot"]) for r in rows] == [
        (0, "a", 0), (1, "a", 1), (2, "a", 2), (3, "b", 0), (4, "b", 1)]
    assert rows[3]["n_cached"] == 5


def test_a_row_without_a_numeric_id_is_left_out_but_keeps_its_place():
    rows = merged_rows({"a": [{"id": "x"}, {"id": 1}], "b": [{"id": 0}]})
    assert [(r["id"], r["replica"]) for r in rows] == [(1, "a"), (2, "b")]


def test_waiting_requests_come_after_every_slot_and_leave_the_numbering_alone():
    waiting = {"state": "queued", "is_processing": False}
    prefilling = {"state": "queued", "is_processing": True}
    rows = merged_rows({"a": [{"id": 0, **prefilling}, {"id": 1}, {"id": 2, **waiting, "id_task": 7}],
                        "b": [{"id": 0}, {"id": 1}, {"id": 2, **waiting, "id_task": 8}, {"id": 3, **waiting}]})
    assert [(r["id"], r["replica"], r["replica_slot"]) for r in rows] == [
        (0, "a", 0), (1, "a", 1), (2, "b", 0), (3, "b", 1), (4, "a", None), (5, "b", None), (6, "b", None)]
    assert [r.get("id_task") for r in rows[4:]] == [7, 8, None]
    assert [locate(i, {"a": 2, "b": 2}) for i in (2, 4)] == [SlotPlace("b", 0), None]


def test_locate_inverts_the_numbering_and_refuses_past_the_end():
    counts = {"b": 2, "a": 3}
    assert [locate(i, counts) for i in range(5)] == [
        SlotPlace("a", 0), SlotPlace("a", 1), SlotPlace("a", 2), SlotPlace("b", 0), SlotPlace("b", 1)]
    assert locate(5, counts) is None and locate(-1, counts) is None and locate(0, {}) is None
