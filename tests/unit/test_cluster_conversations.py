"""Which replica's answer the gateway keeps for a completion's control and a resumable
stream (mlxcel/cluster/conversations.py)."""

import json

from mlxcel.cluster.conversations import control_answer, holder, merged_lookup


def _ok(payload) -> tuple[int, bytes]:
    return 200, json.dumps(payload).encode()


NO_ACTIVE = _ok({"success": False, "message": "no active completion for this id"})
NOT_ARMED = _ok({"success": False, "message": "reasoning control not enabled for this completion"})


def test_the_replica_that_acted_answers_the_control():
    assert control_answer({"a": NO_ACTIVE, "b": _ok({"success": True}), "c": TimeoutError()}) == _ok({"success": True})
    assert control_answer({"a": NO_ACTIVE, "b": NOT_ARMED}) == NOT_ARMED
    assert control_answer({"a": NO_ACTIVE, "b": NO_ACTIVE}) == NO_ACTIVE
    refusal = (400, b'{"error": {"message": "unknown control action"}}')
    assert control_answer({"a": refusal, "b": refusal}) == refusal


def test_a_control_nobody_acted_on_is_retried_while_a_replica_did_not_answer():
    assert control_answer({"a": NO_ACTIVE, "b": ConnectionError()}) is None
    assert control_answer({}) is None


def test_lookups_merge_and_the_holder_is_the_replica_listing_the_exact_id():
    sessions = {"a": _ok([{"conversation_id": "c1::m"}]), "b": _ok([{"conversation_id": "c1"}]), "c": _ok([])}
    assert [s["conversation_id"] for s in merged_lookup(sessions)] == ["c1::m", "c1"]
    assert holder(sessions, "c1") == "b" and holder(sessions, "c2") is None
    assert merged_lookup({**sessions, "d": OSError()}) is None
    assert holder({"a": OSError(), "b": (500, b"x")}, "c1") is None
