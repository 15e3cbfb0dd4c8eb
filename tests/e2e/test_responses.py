"""/v1/responses on SmolLM2 (the shared server) through the OpenAI SDK: create,
stream, structured output, store, chains, conversations, background jobs, errors."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable

import jsonschema
import openai
import pytest

QUESTION = "What is 2+2?"
SHORT = {"model": "m", "temperature": 0, "max_output_tokens": 12}
SPEC_ORDER = ["response.created", "response.in_progress", "response.output_item.added",
              "response.content_part.added", "response.output_text.delta", "response.output_text.done",
              "response.content_part.done", "response.output_item.done"]
FINAL = ("completed", "incomplete", "failed", "cancelled")


def _poll(client, response_id, until=FINAL, timeout=120.0):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        response = client.responses.retrieve(response_id)
        seen.append(response)
        if response.status in until:
            return response, seen
        time.sleep(0.1)
    raise AssertionError(f"{response_id} stayed {seen[-1].status}")


def test_create_returns_a_response_with_text(openai_client):
    response = openai_client.responses.create(input=QUESTION, **SHORT)
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status in ("completed", "incomplete") and response.model
    (message,) = response.output
    assert message.type == "message" and message.role == "assistant"
    assert response.output_text and response.output_text == message.content[0].text
    usage = response.usage
    assert usage.input_tokens > 0 and 0 < usage.output_tokens <= 12
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert response.background is None and response.store is True


def test_stream_events_come_in_the_spec_order(openai_client):
    whole = openai_client.responses.create(input=QUESTION, **SHORT)
    with openai_client.responses.stream(input=QUESTION, **SHORT) as stream:
        events = list(stream)
    types = [e.type for e in events]
    collapsed = [t for i, t in enumerate(types) if i == 0 or t != types[i - 1]]
    assert collapsed == [*SPEC_ORDER, f"response.{whole.status}"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = next(e for e in events if e.type == "response.output_text.done")
    final = events[-1].response
    assert deltas == done.text == final.output_text == whole.output_text
    assert final.output[0].id == events[2].item.id and final.usage.output_tokens == whole.usage.output_tokens


def test_stream_helper_gives_the_final_response(openai_client):
    with openai_client.responses.stream(model="m", input="Say hi.", temperature=0, max_output_tokens=64) as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == text


def test_text_format_json_schema_is_valid_json(openai_client):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}
    response = openai_client.responses.create(
        model="m", input=QUESTION, temperature=0, max_output_tokens=40,
        text={"format": {"type": "json_schema", "name": "sum", "schema": schema, "strict": True}})
    assert response.status == "completed"
    jsonschema.validate(json.loads(response.output_text), schema)
    assert response.text.format.type == "json_schema"


def test_chat_shaped_response_format_is_honoured_too(http):
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}
    response = http.post("/v1/responses", json={
        "input": QUESTION, "temperature": 0, "max_output_tokens": 40,
        "response_format": {"type": "json_schema", "json_schema": {"name": "sum", "schema": schema}}}).json()
    assert response["status"] == "completed"
    text = response["output"][-1]["content"][0]["text"]
    jsonschema.validate(json.loads(text), schema)
    assert response["text"]["format"] == {"type": "json_schema", "name": "sum", "schema": schema}
    loose = http.post("/v1/responses", json={"input": QUESTION, "temperature": 0, "max_output_tokens": 40,
                                             "response_format": {"type": "json_object"}}).json()
    assert isinstance(json.loads(loose["output"][-1]["content"][0]["text"]), dict)
    assert loose["text"]["format"] == {"type": "json_object"}
    for bad in ("json", {"type": "yaml"}):
        refused = http.post("/v1/responses", json={"input": QUESTION, "max_output_tokens": 4, "response_format": bad})
        assert refused.status_code == 400, refused.text


def test_retrieve_and_delete(openai_client):
    created = openai_client.responses.create(input=QUESTION, **SHORT)
    fetched = openai_client.responses.retrieve(created.id)
    assert fetched.model_dump() == created.model_dump()
    assert openai_client.responses.delete(created.id) is None
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.delete(created.id)


def test_store_false_is_returned_but_not_kept(openai_client):
    response = openai_client.responses.create(input=QUESTION, store=False, **SHORT)
    assert response.store is False and response.output_text
    with pytest.raises(openai.NotFoundError):
        openai_client.responses.retrieve(response.id)


def _as_input(output) -> list[dict]:
    return [item.model_dump(exclude_none=True) for item in output]


def test_previous_response_id_continues_without_its_instructions(openai_client):
    first = openai_client.responses.create(input="My name is Tom.", instructions="Be brief.", **SHORT)
    follow_up = "What is my name?"
    chained = openai_client.responses.input_tokens.count(model="m", input=follow_up, previous_response_id=first.id)
    replayed = openai_client.responses.input_tokens.count(
        model="m", input=[{"role": "user", "content": "My name is Tom."}, *_as_input(first.output),
                          {"role": "user", "content": follow_up}])
    assert chained.input_tokens == replayed.input_tokens
    second = openai_client.responses.create(input=follow_up, previous_response_id=first.id, **SHORT)
    assert second.previous_response_id == first.id and second.instructions is None
    assert second.usage.input_tokens == chained.input_tokens
    with pytest.raises(openai.BadRequestError, match="not found"):
        openai_client.responses.create(input="x", previous_response_id="resp_nope", **SHORT)


def test_conversation_keeps_a_transcript(openai_client):
    conversation = f"conv_{uuid.uuid4().hex}"
    first = openai_client.responses.create(input="My name is Tom.", conversation=conversation, **SHORT)
    second = openai_client.responses.create(input="What is my name?", conversation=conversation, **SHORT)
    assert first.conversation.id == conversation == second.conversation.id
    counted = openai_client.responses.input_tokens.count(model="m", input="And yours?", conversation=conversation)
    replayed = openai_client.responses.input_tokens.count(model="m", input=[
        {"role": "user", "content": "My name is Tom."}, *_as_input(first.output),
        {"role": "user", "content": "What is my name?"}, *_as_input(second.output),
        {"role": "user", "content": "And yours?"}])
    assert counted.input_tokens == replayed.input_tokens
    with pytest.raises(openai.BadRequestError, match="together"):
        openai_client.responses.create(input="x", conversation=conversation, previous_response_id=first.id, **SHORT)


def test_background_job_polls_to_completion(openai_client):
    created = openai_client.responses.create(input=QUESTION, background=True, **SHORT)
    assert created.status == "queued" and created.background is True
    assert created.output == [] and created.usage.total_tokens == 0
    final, seen = _poll(openai_client, created.id)
    assert final.status in ("completed", "incomplete") and final.background is True
    assert final.output_text and final.usage.output_tokens > 0
    assert all(r.output == [] and r.usage.total_tokens == 0 for r in seen if r.status in ("queued", "in_progress"))
    chained = openai_client.responses.create(input="Thanks!", previous_response_id=created.id, **SHORT)
    assert chained.usage.input_tokens > final.usage.input_tokens


def test_background_job_can_be_cancelled(openai_client, http):
    created = openai_client.responses.create(model="m", input="Write a long story.", background=True,
                                             max_output_tokens=600, extra_body={"ignore_eos": True})
    running, _ = _poll(openai_client, created.id, until=("in_progress",))
    unfinished = f"previous response '{created.id}' has not finished (status: in_progress)"
    assert http.post("/v1/responses", json={"input": "x", "previous_response_id": created.id}).json()[
        "error"]["message"] == unfinished
    assert http.delete(f"/v1/responses/{created.id}").status_code == 400
    cancelled = openai_client.responses.cancel(created.id)
    assert cancelled.status == "cancelled" and cancelled.output == []
    assert openai_client.responses.retrieve(created.id).status == "cancelled"
    assert openai_client.responses.cancel(created.id).status == "cancelled"
    deadline = time.monotonic() + 30
    while any(s["state"] != "idle" for s in http.get("/slots").json()):
        assert time.monotonic() < deadline, "the cancelled job kept its slot"
        time.sleep(0.1)
    assert openai_client.responses.delete(created.id) is None


def test_background_with_store_false_is_polled_but_not_continued(openai_client, http):
    created = openai_client.responses.create(input=QUESTION, background=True, store=False, **SHORT)
    final, _ = _poll(openai_client, created.id)
    assert final.status in ("completed", "incomplete") and final.store is False
    error = http.post("/v1/responses", json={"input": "x", "previous_response_id": created.id}).json()["error"]
    assert "store: false" in error["message"]


def test_a_finished_response_cannot_be_cancelled(openai_client):
    response = openai_client.responses.create(input=QUESTION, **SHORT)
    with pytest.raises(openai.BadRequestError, match="has finished"):
        openai_client.responses.cancel(response.id)


@pytest.mark.parametrize("body, needle", [
    ({"tools": [{"type": "web_search"}]}, "web_search"),
    ({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}, "code_interpreter"),
    ({"truncation": "auto"}, "truncation"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]}, "input_file"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/a.png"}]}]},
     "not supported by model"),
    ({"stream": True, "background": True}, "background"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nonsense"}}}}, ""),
    ({"input": []}, "empty"),
    ({"context_management": [{"type": "other"}]}, "compaction"),
])
def test_unsupported_requests_are_400s(http, body, needle):
    response = http.post("/v1/responses", json={"input": QUESTION, "max_output_tokens": 4, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and needle in error["message"]


def test_routes_without_the_v1_prefix(http):
    created = http.post("/responses", json={"input": QUESTION, "max_output_tokens": 4}).json()
    assert http.get(f"/responses/{created['id']}").json()["id"] == created["id"]
    assert http.post("/responses/input_tokens", json={"input": QUESTION}).json()["input_tokens"] == \
        created["usage"]["input_tokens"]
    assert http.delete(f"/responses/{created['id']}").json() == {"id": created["id"], "object": "response.deleted",
                                                                  "deleted": True}


def test_top_logprobs_come_with_the_text(openai_client):
    response = openai_client.responses.create(input=QUESTION, top_logprobs=2, **SHORT)
    part = response.output[0].content[0]
    assert response.usage.output_tokens - 1 <= len(part.logprobs) <= response.usage.output_tokens  # an end token
    assert "".join(lp.token for lp in part.logprobs) == part.text
    assert all(len(lp.top_logprobs) == 2 and lp.logprob <= 0 for lp in part.logprobs)
    assert response.top_logprobs == 2


LONG_STREAM = {"input": "Write a long story.", "stream": True, "max_output_tokens": 600, "ignore_eos": True}


def stream_acting_midway(server, act: Callable[[str], None]) -> list[dict]:
    """A long streamed response's events; `act(its id)` runs once its third delta came."""
    with server.client() as client, client.stream("POST", "/v1/responses", json=LONG_STREAM) as response:
        events = []
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(json.loads(line[6:]))
            if events[-1]["type"] == "response.output_text.delta" and len(events) == 6:
                act(events[0]["response"]["id"])
    return events


def test_a_streaming_response_in_progress_can_be_cancelled(server, http):
    answers = []
    events = stream_acting_midway(server, lambda rid: answers.append(http.post(f"/v1/responses/{rid}/cancel")))
    cancelled = answers[0].json()
    assert cancelled["status"] == "cancelled"
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.incomplete" and final["status"] == "cancelled"
    assert final["usage"]["output_tokens"] < 600
    stored = http.get(f"/v1/responses/{final['id']}").json()
    assert stored["status"] == "cancelled"
    # the cancel answered with the recorded object: the output so far and when it ended, as GET shows it
    assert cancelled == stored == final
    assert stored["output"] and stored["completed_at"]


def test_a_stored_response_in_progress_reads_as_in_progress_until_it_ends(server, http):
    answers = {}

    def meanwhile(response_id: str) -> None:
        answers["id"] = response_id
        answers["seen"] = http.get(f"/v1/responses/{response_id}")
        answers["deleted"] = http.delete(f"/v1/responses/{response_id}")
        answers["continued"] = http.post("/v1/responses", json={"input": "And then?", "max_output_tokens": 2,
                                                                "previous_response_id": response_id})
        http.post(f"/v1/responses/{response_id}/cancel")

    stream_acting_midway(server, meanwhile)
    response_id, seen, deleted, continued = answers["id"], answers["seen"], answers["deleted"], answers["continued"]
    assert seen.status_code == 200 and seen.json()["status"] == "in_progress" and seen.json()["id"] == response_id
    assert deleted.status_code == 400 and "has not finished" in deleted.json()["error"]["message"]
    assert continued.status_code == 400
    assert continued.json()["error"]["code"] == "previous_response_not_finished"
    assert http.get(f"/v1/responses/{response_id}").json()["status"] == "cancelled"  # recorded once it ended
    assert http.delete(f"/v1/responses/{response_id}").status_code == 200
