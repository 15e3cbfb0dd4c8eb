"""llama-server's resumable streams on the shared server: a generation streamed with an
X-Conversation-Id header goes on after its client leaves, and GET /v1/stream replays it
byte for byte from any offset, live to its end; POST /v1/streams/lookup answers only for
the ids asked about; DELETE /v1/stream (and a new stream of the same conversation) stops
the generation and frees its slot; bad input gets 4xx in the spec's format."""

from __future__ import annotations

import json
import socket
import time
import uuid

import httpx
import pytest

pytestmark = pytest.mark.slow


def _open_stream(server, conversation: str, max_tokens: int, path: str = "/v1/chat/completions") -> socket.socket:
    """A raw streaming request whose client can vanish at once (the socket closed)."""
    if path == "/completion":
        body = f'{{"prompt": "Tell a long story.", "n_predict": {max_tokens}, "stream": true, "ignore_eos": true}}'
    else:
        body = ('{"messages": [{"role": "user", "content": "Tell a long story."}], "stream": true, '
                f'"max_tokens": {max_tokens}, "ignore_eos": true}}')
    raw = socket.create_connection(("127.0.0.1", server.port))
    raw.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"X-Conversation-Id: {conversation}\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
    return raw


def _read_some(raw: socket.socket, at_least: int) -> bytes:
    data = b""
    while data.count(b"data: ") < at_least:
        data += raw.recv(65536)
    return data


def _body_of(response: bytes) -> bytes:
    """The SSE bytes of a chunked HTTP/1.1 response read so far (whole chunks only)."""
    _, _, rest = response.partition(b"\r\n\r\n")
    body = b""
    while rest:
        size_line, sep, rest = rest.partition(b"\r\n")
        if not sep:
            break
        size = int(size_line, 16)
        if size == 0 or len(rest) < size + 2:
            break
        body, rest = body + rest[:size], rest[size + 2:]
    return body


def _lookup(http, *ids: str) -> list[dict]:
    answer = http.post("/v1/streams/lookup", json={"conversation_ids": list(ids)})
    assert answer.status_code == 200, answer.text
    return answer.json()


def _wait_done(http, conversation: str) -> dict:
    deadline = time.monotonic() + 120
    while not (found := _lookup(http, conversation))[0]["is_done"]:
        assert time.monotonic() < deadline, found
        time.sleep(0.1)
    return found[0]


def _in_flight(http) -> int:
    return sum(1 for slot in http.get("/slots").json() if slot["is_processing"])


def test_a_stream_goes_on_without_its_client_and_replays_from_any_offset(server, http):
    conversation = f"conv-{uuid.uuid4().hex}"
    raw = _open_stream(server, conversation, 160)
    early = _read_some(raw, 5)
    raw.close()  # the client goes away after a few chunks
    running = _lookup(http, conversation, "never-streamed")
    assert [s["conversation_id"] for s in running] == [conversation]
    done = _wait_done(http, conversation)
    whole = http.get("/v1/stream", params={"conv_id": conversation})
    assert whole.status_code == 200 and whole.headers["content-type"].startswith("text/event-stream")
    events = [line for line in whole.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(whole.content) == done["total_bytes"]
    assert sum('"content":' in e for e in events) >= 150  # the generation ran on to its end, unread
    seen = _body_of(early)
    assert seen and whole.content.startswith(seen)
    rest = http.get("/v1/stream", params={"conv_id": conversation, "from": len(seen)})
    assert seen + rest.content == whole.content
    assert done["completed_at"] >= done["started_at"] > 0


def test_a_replay_follows_a_live_stream_to_its_end(server, http):
    conversation = f"conv-{uuid.uuid4().hex}"
    raw = _open_stream(server, conversation, 200, path="/completion")
    _read_some(raw, 2)
    raw.close()
    with http.stream("GET", "/v1/stream", params={"conv_id": conversation}) as replay:
        assert not _lookup(http, conversation)[0]["is_done"]  # read while it is still generating
        lines = [line for line in replay.iter_lines() if line.startswith("data: ")]
    final = json.loads(lines[-1][6:])
    assert final["stop"] is True and final["tokens_predicted"] == 200
    # every partial from the stream's first on, in order (a sampled token whose text is
    # empty, as the end token ignore_eos lets through, has no line of its own)
    predicted = [json.loads(line[6:])["tokens_predicted"] for line in lines[:-1]]
    assert predicted == sorted(set(predicted)) and predicted[0] <= 5 and len(predicted) >= 150


def test_delete_stops_the_generation_and_frees_its_slot(server, http):
    conversation = f"conv-{uuid.uuid4().hex}"
    raw = _open_stream(server, conversation, 3000)
    _read_some(raw, 2)
    raw.close()
    assert _in_flight(http) == 1
    stopped = http.delete("/v1/stream", params={"conv_id": conversation})
    assert stopped.status_code == 204
    deadline = time.monotonic() + 10
    while _in_flight(http):
        assert time.monotonic() < deadline, "the deleted stream's generation still runs"
        time.sleep(0.1)
    assert _lookup(http, conversation) == []
    assert http.get("/v1/stream", params={"conv_id": conversation}).status_code == 404
    assert http.delete("/v1/stream", params={"conv_id": conversation}).status_code == 204  # idempotent


def test_a_new_stream_of_the_conversation_replaces_the_old_one(server, http):
    conversation = f"conv-{uuid.uuid4().hex}"
    first = _open_stream(server, conversation, 3000)
    _read_some(first, 2)
    first.close()
    second = _open_stream(server, conversation, 8)
    _read_some(second, 2)
    deadline = time.monotonic() + 10
    while _in_flight(http) > 1:
        assert time.monotonic() < deadline, "the replaced stream's generation still runs"
        time.sleep(0.1)
    second.close()
    assert _wait_done(http, conversation)["total_bytes"] < 20_000  # the short one's stream, not the long one's


@pytest.mark.parametrize("method, path, params, body, status", [
    ("GET", "/v1/stream", {}, None, 400),
    ("GET", "/v1/stream", {"conv_id": "never-streamed"}, None, 404),
    ("DELETE", "/v1/stream", {}, None, 400),
    ("POST", "/v1/streams/lookup", {}, b"[1, 2]", 400),
    ("POST", "/v1/streams/lookup", {}, b'{"conversation_ids": ["\\ud800"]}', 400),
    ("POST", "/v1/streams/lookup", {}, b"{", 400),
])
def test_bad_stream_requests_get_4xx_in_the_spec_format(http, method, path, params, body, status):
    answer = http.request(method, path, params=params, content=body,
                          headers={"content-type": "application/json"} if body is not None else None)
    assert answer.status_code == status and answer.json()["error"]["message"], answer.text


def test_a_bad_offset_is_refused(server, http):
    conversation = f"conv-{uuid.uuid4().hex}"
    raw = _open_stream(server, conversation, 4)
    _read_some(raw, 1)
    raw.close()
    _wait_done(http, conversation)
    for offset in ("abc", "-1", "1e3", "9" * 40):
        answer = http.get("/v1/stream", params={"conv_id": conversation, "from": offset})
        assert answer.status_code == 400 and answer.json()["error"]["message"] == "Invalid 'from' offset"
    past = http.get("/v1/stream", params={"conv_id": conversation, "from": 10**9})
    assert past.status_code == 200 and past.content == b""  # nothing from there on, and the stream has ended
    assert _lookup(http, *[f"x{i}" for i in range(5)]) == []
    with pytest.raises(httpx.HTTPStatusError):
        http.post("/v1/streams/lookup", json={"conversation_ids": ["x"] * 2000}).raise_for_status()
