"""Compaction on SmolLM2 (the shared server, 1024-token slots): the compact route,
replaying its output, and automatic compaction by compact_threshold."""

from __future__ import annotations

import base64
import json
import time

import openai
import pytest

TURNS = [
    ("My name is Tom and I live in Paris, in a small flat near the river.", "Nice to meet you, Tom."),
    ("I have two cats named Max and Leo, and they love sleeping in the sun.", "Max and Leo sound lovely."),
    ("My favourite colour is blue and my favourite food is pasta with tomatoes.", "Blue and pasta, noted."),
    ("I work as a teacher at a school for young children in the city centre.", "Teaching is a great job."),
]
SUMMARY = {"max_output_tokens": 40, "keep_tokens": 16}


def _history(question: str = "What is my name?") -> list[dict]:
    items: list[dict] = [{"role": "developer", "content": "Be brief."}]
    for user, assistant in TURNS:
        items.append({"role": "user", "content": user})
        items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": assistant}]})
    items.append({"role": "user", "content": question})
    return items


def _capsule(item: dict) -> dict:
    text = item["encrypted_content"]
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def _finished(client, response_id: str):
    deadline = time.monotonic() + 120
    while (response := client.responses.retrieve(response_id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    return response


def _count(http, **body) -> int:
    response = http.post("/v1/responses/input_tokens", json=body)
    assert response.status_code == 200, response.text
    return response.json()["input_tokens"]


def test_compact_route_summarizes_older_turns(openai_client, http):
    history = _history()
    raw = openai_client.responses.with_raw_response.compact(model="m", input=history,
                                                             extra_body={"temperature": 0, **SUMMARY})
    assert raw.parse().object == "response.compaction"
    body = raw.http_response.json()  # the kept items as the client sent them
    assert body["object"] == "response.compaction" and body["id"].startswith("resp_")
    output = body["output"]
    assert output[0] == {"role": "developer", "content": "Be brief."}
    assert output[-1]["type"] == "compaction" and output[-1]["id"].startswith("cmp_")
    capsule = _capsule(output[-1])
    assert capsule["summary"] and capsule["retained"] == output[1:-1]
    assert capsule["retained"][-1] == {"role": "user", "content": "What is my name?"}
    assert 0 < body["usage"]["output_tokens"] <= 40
    assert _count(http, input=output) < _count(http, input=history)
    # the compacted history replays through /v1/responses
    reply = http.post("/v1/responses", json={"input": [*output, {"role": "user", "content": "Thanks."}],
                                             "max_output_tokens": 4, "temperature": 0})
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize("extra, needle", [
    ({"stream": True}, "stream"),
    ({"previous_response_id": "resp_x"}, "previous_response_id"),
    ({"conversation": "conv_x"}, "conversation"),
    ({"keep_tokens": 0}, "keep_tokens"),
    ({"max_output_tokens": 20000}, "max_output_tokens"),
])
def test_compact_rejects(http, extra, needle):
    response = http.post("/v1/responses/compact", json={"input": _history(), **extra})
    assert response.status_code == 400 and needle in response.json()["error"]["message"]


def test_compaction_that_cannot_help_is_context_length_exceeded(http):
    alone = http.post("/v1/responses/compact", json={"input": "Hello"})
    too_long = http.post("/v1/responses/compact", json={"input": [
        {"role": "user", "content": "word " * 1200}, {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "and?"}]})
    for response in (alone, too_long):
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "context_length_exceeded"


def test_automatic_compaction_streams_its_events_and_chains(http):
    history = _history()
    before = _count(http, input=history)
    policy = [{"type": "compaction", "compact_threshold": before - 1, **SUMMARY}]
    with http.stream("POST", "/v1/responses", json={
        "input": history, "context_management": policy, "stream": True, "temperature": 0, "max_output_tokens": 8,
    }) as response:
        assert response.status_code == 200
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    types = [e["type"] for e in events]
    assert types[:6] == ["response.created", "response.in_progress", "mlx.compaction.started",
                         "mlx.compaction.completed", "response.output_item.added", "response.output_item.done"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    started, completed = events[2], events[3]
    assert started["input_tokens"] == before == completed["input_tokens_before"]
    assert completed["input_tokens_after"] < before and started["response_id"] == events[0]["response"]["id"]
    final = events[-1]["response"]
    assert final["output"][0]["type"] == "compaction" and final["output"][1]["type"] == "message"
    assert final["usage"]["input_tokens"] == completed["input_tokens_after"]
    # the next step replays the summary, under the threshold: no second compaction
    chained = http.post("/v1/responses", json={"input": "And my cats?", "previous_response_id": final["id"],
                                               "context_management": policy, "max_output_tokens": 4})
    assert chained.status_code == 200, chained.text
    assert chained.json()["output"][0]["type"] == "message"
    assert chained.json()["usage"]["input_tokens"] < before


def test_automatic_compaction_of_a_background_job(openai_client):
    created = openai_client.responses.create(
        model="m", input=_history(), background=True, temperature=0, max_output_tokens=4,
        context_management=[{"type": "compaction", "compact_threshold": 1, **SUMMARY}])
    assert created.status == "queued"
    final = _finished(openai_client, created.id)
    assert final.status in ("completed", "incomplete")
    assert [item.type for item in final.output][:2] == ["compaction", "message"]


def test_compaction_failure_in_a_job_fails_the_job_not_the_create(openai_client):
    created = openai_client.responses.create(
        model="m", input=[{"role": "user", "content": "word " * 1100}], background=True, max_output_tokens=4,
        context_management=[{"type": "compaction", "compact_threshold": 1}])
    final = _finished(openai_client, created.id)
    assert final.status == "failed" and final.error.code == "invalid_prompt"
    with pytest.raises(openai.BadRequestError):
        openai_client.responses.create(model="m", input=[{"role": "user", "content": "word " * 1100}],
                                       max_output_tokens=4,
                                       context_management=[{"type": "compaction", "compact_threshold": 1}])
