"""Which replica answers for a running completion or a resumable stream: only the
replica running it knows it, so the gateway asks every replica and keeps the answer of
the one that did (mlxcel/cluster/gateway.py). Pure choices over the replicas' answers
(replica id -> (status, body), or what its call raised)."""

from __future__ import annotations

import json

Answers = dict[str, "tuple[int, bytes] | BaseException"]


def _json(body: bytes):
    try:
        return json.loads(body)
    except ValueError:
        return None


def control_answer(answers: Answers) -> tuple[int, bytes] | None:
    """POST /v1/chat/completions/control: the replica that acted; else a refusal of the
    body (every replica reads the same one); else "no active completion", once every
    replica answered (None while one did not: it may be the one running it)."""
    replied = [a for a in answers.values() if not isinstance(a, BaseException)]
    for status, body in replied:
        if status == 200 and (_json(body) or {}).get("success") is True:
            return status, body
    refused = next(((s, b) for s, b in replied if s != 200), None)
    if refused is not None:
        return refused
    if len(replied) < len(answers) or not replied:
        return None
    # "not enabled for this completion" (a replica that runs it) before "no active completion"
    return min(replied, key=lambda a: "no active" in ((_json(a[1]) or {}).get("message") or ""))


def merged_lookup(answers: Answers) -> list | None:
    """POST /v1/streams/lookup: every replica's sessions; None when one did not answer."""
    merged = []
    for answer in answers.values():
        if isinstance(answer, BaseException) or answer[0] != 200 or not isinstance(_json(answer[1]), list):
            return None
        merged += _json(answer[1])
    return merged


def holder(answers: Answers, conversation_id: str) -> str | None:
    """The replica whose lookup lists the conversation's own session."""
    for replica, answer in sorted(answers.items()):
        if isinstance(answer, BaseException) or answer[0] != 200:
            continue
        sessions = _json(answer[1])
        if isinstance(sessions, list) and any(isinstance(s, dict) and s.get("conversation_id") == conversation_id
                                              for s in sessions):
            return replica
    return None
