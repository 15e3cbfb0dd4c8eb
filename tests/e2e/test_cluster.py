"""Replicas on Ray Serve behind one endpoint: two SmolLM2 replicas of one thread each
(`mlxcel serve --replicas 2 -t 1`). Every API answers through the gateway as it does
from one process; a conversation's turns stay on the replica holding its prefix while
unrelated requests spread; /health, /metrics and /v1/metrics speak for every replica;
a change of the server's LoRA scales or a cache reset reaches every replica; the slot
routes number both replicas' slots in one sequence and a slot file saved on one replica
restores on the other; a completion's control and a resumable stream reach the replica
running them; a replica
killed mid-stream ends that stream with an error event, the survivor takes new
requests at once, and Ray brings the replica back. The kill test runs last."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import shutil
import signal
import tempfile
import time

import httpx
import pytest

from tests.cluster_process import ClusterProcess
from tests.fixtures.lora_adapter import write_lora_adapter

pytestmark = pytest.mark.slow
SYSTEM = ("You are a careful assistant for a team of geographers. Answer in one short sentence, in English, "
          "and say when you are not sure. Never invent numbers; prefer well known facts about rivers, "
          "mountains, capitals and coasts. ")


@pytest.fixture(scope="module")
def cluster(redis_server, tmp_path_factory):
    """Two replicas sharing their Responses state in a real Redis; the gateway listens on
    TCP and on a UNIX socket. A LoRA adapter is loaded at scale 0 (the output is the
    model's own until a test applies it)."""
    socket_path = tempfile.mkdtemp(prefix="mlxcel-gw-") + "/gateway.sock"
    adapter = write_lora_adapter(tmp_path_factory.mktemp("lora") / "adapter.gguf")
    slot_files = tmp_path_factory.mktemp("slot-files")
    proc = ClusterProcess("--replicas", "2", "-t", "1", "-np", "2", "-c", "4096", "--metrics",
                          "--slot-save-path", str(slot_files),
                          "--state-url", f"{redis_server.url}/3", "--host", f"127.0.0.1,{socket_path}",
                          "--lora", str(adapter), "--lora-init-without-apply")
    proc.socket_path = socket_path
    try:
        yield proc.wait_ready(replicas=2)
    finally:
        proc.stop()
        shutil.rmtree(os.path.dirname(socket_path), ignore_errors=True)


@pytest.fixture
def client(cluster):
    with cluster.client(timeout=120) as c:
        yield c


def chat(client, messages, **fields):
    answer = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 8, "temperature": 0,
                                                        **fields})
    assert answer.status_code == 200, answer.text
    return answer


def test_chat_completions_and_stream(client):
    answer = chat(client, [{"role": "user", "content": "Name a river."}])
    body = answer.json()
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] > 0
    assert answer.headers["x-mlxcel-replica"]
    with client.stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Name a mountain."}], "max_tokens": 8, "stream": True,
            "stream_options": {"include_usage": True}}) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in stream.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["usage"]["completion_tokens"] > 0


def test_the_gateway_also_listens_on_a_unix_socket(cluster):
    with httpx.Client(transport=httpx.HTTPTransport(uds=cluster.socket_path), base_url="http://gateway",
                      timeout=120) as over_socket:
        assert over_socket.get("/health?ready=1").status_code == 200
        answer = chat(over_socket, [{"role": "user", "content": "Name a lake."}])
        assert answer.headers["x-mlxcel-replica"]


def test_anthropic_messages_stream(client):
    with client.stream("POST", "/v1/messages", json={
            "model": "x", "max_tokens": 8, "stream": True,
            "messages": [{"role": "user", "content": "Name a coast."}]}) as stream:
        assert stream.status_code == 200
        kinds = [line[7:] for line in stream.iter_lines() if line.startswith("event: ")]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"


def test_completions_native_and_tokenize(client):
    legacy = client.post("/v1/completions", json={"prompt": "The capital of France is", "max_tokens": 4})
    assert legacy.status_code == 200 and legacy.json()["choices"][0]["text"]
    native = client.post("/completion", json={"prompt": "Rivers flow", "n_predict": 4})
    assert native.status_code == 200 and native.json()["tokens_predicted"] == 4
    tokens = client.post("/tokenize", json={"content": "hello world"}).json()["tokens"]
    assert client.post("/detokenize", json={"tokens": tokens}).json()["content"].strip() == "hello world"
    assert client.get("/v1/models").json()["data"][0]["id"]


def test_responses_chain_is_shared_by_every_replica(client):
    """Replicas share the state store: a chain continues and reads back from any of them."""
    first = client.post("/v1/responses", json={"input": "Name a capital.", "max_output_tokens": 8})
    assert first.status_code == 200, first.text
    second = client.post("/v1/responses", json={"input": "And another.", "max_output_tokens": 8,
                                                 "previous_response_id": first.json()["id"]})
    assert second.status_code == 200, second.text
    assert second.json()["previous_response_id"] == first.json()["id"]
    # the continuation goes where the chain's prefix is cached
    assert second.headers["x-mlxcel-replica"] == first.headers["x-mlxcel-replica"]
    assert second.json()["usage"]["input_tokens_details"]["cached_tokens"] > 0
    seen = set()
    for _ in range(20):  # idle replicas tie on load and take turns; reports refresh twice a second
        got = client.get(f"/v1/responses/{first.json()['id']}")
        assert got.status_code == 200 and got.json()["id"] == first.json()["id"]
        seen.add(got.headers["x-mlxcel-replica"])
        if len(seen) == 2:
            break
        time.sleep(0.3)
    assert len(seen) == 2, "both replicas must find the stored response"


def test_errors_keep_the_spec_format(client):
    bad = client.post("/v1/chat/completions", content=b"{bad", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    anthropic = client.post("/v1/messages", json={"max_tokens": "many", "messages": []})
    assert anthropic.status_code == 400 and anthropic.json()["type"] == "error"
    missing = client.get("/v1/responses/resp_unknown")
    assert missing.status_code == 404 and "error" in missing.json()
    preflight = client.options("/v1/chat/completions", headers={"Origin": "http://app.example",
                                                                "Access-Control-Request-Method": "POST"})
    assert preflight.status_code in (200, 204) and preflight.headers["access-control-allow-origin"]
    lone = client.post("/v1/chat/completions", content=b'{"messages":[{"role":"user","content":"\\ud800"}]}',
                       headers={"content-type": "application/json"})
    assert lone.status_code == 400


def test_a_slot_pinned_body_nested_too_deep_for_python_is_refused_in_the_spec_format(client):
    deep = b'{"id_slot": 0, "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    answer = client.post("/v1/chat/completions", content=deep, headers={"content-type": "application/json"})
    assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error", answer.text


def test_whole_answers_and_head_keep_the_replica_s_content_length(client):
    for answer in (client.get("/v1/models"), client.get("/v1/responses/resp_unknown"),
                   chat(client, [{"role": "user", "content": "Hi"}])):
        assert int(answer.headers["content-length"]) == len(answer.content), answer.headers
        assert "transfer-encoding" not in answer.headers
    head = client.head("/v1/models")
    assert head.status_code == 200 and int(head.headers["content-length"]) == len(client.get("/v1/models").content)


def test_oversized_body_is_refused_at_the_gateway(cluster):
    with cluster.client() as c:
        answer = c.post("/v1/chat/completions", content=b"x" * (33 * 1024 * 1024),
                        headers={"content-type": "application/json"})
    assert answer.status_code == 413 and "error" in answer.json()


def test_conversation_stays_on_its_replica_and_others_spread(client):
    messages = [{"role": "system", "content": SYSTEM * 3}, {"role": "user", "content": "Name a long river."}]
    homes, cached = [], []
    for turn in range(4):
        answer = chat(client, messages)
        homes.append(answer.headers["x-mlxcel-replica"])
        cached.append(answer.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
        messages += [{"role": "assistant", "content": answer.json()["choices"][0]["message"]["content"]},
                     {"role": "user", "content": f"Another one, number {turn + 2}?"}]
    assert len(set(homes)) == 1, homes
    assert all(c > 100 for c in cached[1:]), cached  # each turn found the one before it
    # unrelated conversations at once: both replicas take some
    def unrelated(i):
        return chat(client, [{"role": "system", "content": f"Conversation {i}: answer with a single word."},
                             {"role": "user", "content": f"Pick a colour for item {i}."}],
                    max_tokens=24).headers["x-mlxcel-replica"]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        placed = list(pool.map(unrelated, range(6)))
    assert len(set(placed)) == 2, placed
    routing = client.get("/v1/metrics").json()["routing"]
    assert routing["prefix"] >= 3 and routing["load"] >= 1


def test_health_and_metrics_speak_for_every_replica(client):
    health = client.get("/health?ready=1")
    assert health.status_code == 200
    replicas = health.json()["replicas"]
    assert len(replicas) == 2 and all(r["status"] == 200 and r["pid"] for r in replicas.values())
    text = client.get("/metrics").text
    assert "# TYPE" in text
    for replica in replicas:
        assert f'replica="{replica}"' in text
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(families) == len(set(families)), "each family once, under one TYPE"
    snapshot = client.get("/v1/metrics").json()
    assert snapshot["replica_count"] == 2 and {r["replica"] for r in snapshot["replicas"]} == set(replicas)


def test_a_change_of_lora_scales_and_a_cache_reset_reach_every_replica(client):
    changed = client.post("/lora-adapters", json=[{"id": 0, "scale": 0.5}])
    try:
        # GETs go to either replica (the gateway forwards them to whichever Ray picks)
        scales = {client.get("/lora-adapters").json()[0]["scale"] for _ in range(16)}
        refused = client.post("/lora-adapters", json=[{"id": 3, "scale": 1}])
    finally:
        restored = client.post("/lora-adapters", json=[{"id": 0, "scale": 0.0}])
    assert changed.status_code == 200 and changed.json() == {"success": True} and restored.status_code == 200
    assert scales == {0.5}
    assert refused.status_code == 400 and "invalid adapter id" in refused.json()["error"]["message"]
    chat(client, [{"role": "user", "content": SYSTEM + "Name a river."}])  # something cached on one replica
    reset = client.post("/v1/cache/reset")
    assert reset.status_code == 200 and len(reset.json()["replicas"]) == 2
    assert reset.json()["freed_entries"] == sum(r["freed_entries"] for r in reset.json()["replicas"].values())


def test_slots_are_numbered_across_replicas_and_a_slot_file_moves_between_them(client):
    rows = client.get("/slots").json()
    replicas = sorted({row["replica"] for row in rows})
    assert len(replicas) == 2
    assert [(row["id"], row["replica"], row["replica_slot"]) for row in rows] == [
        (0, replicas[0], 0), (1, replicas[0], 1), (2, replicas[1], 0), (3, replicas[1], 1)]
    for slot in range(4):
        erased = client.post(f"/slots/{slot}?action=erase")
        assert erased.status_code == 200 and erased.json()["id_slot"] == slot, erased.text
    chat(client, [{"role": "user", "content": SYSTEM + "Name a long river."}])
    held = [row for row in client.get("/slots").json() if row["n_cached"]]
    assert len(held) == 1, held
    source = held[0]
    target = next(row["id"] for row in rows if row["replica"] != source["replica"])
    saved = client.post(f"/slots/{source['id']}?action=save", json={"filename": "cluster-slot.bin"})
    assert saved.status_code == 200, saved.text
    assert saved.json()["id_slot"] == source["id"] and saved.json()["n_saved"] == source["n_cached"]
    restored = client.post(f"/slots/{target}?action=restore", json={"filename": "cluster-slot.bin"})
    assert restored.status_code == 200, restored.text
    assert restored.json()["id_slot"] == target and restored.json()["replica"] != source["replica"]
    assert restored.json()["n_restored"] == source["n_cached"]
    assert client.get("/slots").json()[target]["n_cached"] == source["n_cached"]
    # a request's id_slot numbers slots as GET /slots does: it runs on that slot's replica
    pinned = next(row for row in rows if row["id"] not in (source["id"], target))
    answer = chat(client, [{"role": "user", "content": "Name a lake."}], id_slot=pinned["id"])
    assert answer.headers["x-mlxcel-replica"] == pinned["replica"]
    assert client.get("/slots").json()[pinned["id"]]["n_cached"] > 0
    for bad in ("4", "x", "99999999999"):
        refused = client.post(f"/slots/{bad}?action=erase")
        assert refused.status_code == 400 and refused.json()["error"]["type"] == "invalid_request_error", refused.text


def test_a_completion_s_control_and_a_resumable_stream_reach_the_replica_running_them(client):
    """The control and the stream routes are asked of the replica that holds the
    completion or the stream, wherever the gateway's own call would have landed."""
    conversation = f"conv-{os.getpid()}-{time.monotonic_ns()}"
    with client.stream("POST", "/v1/chat/completions", headers={"X-Conversation-Id": conversation}, json={
            "messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 64, "ignore_eos": True,
            "stream": True}) as stream:
        lines = stream.iter_lines()  # held: a lines iterator freed would close the stream
        first = json.loads(next(line for line in lines if line.startswith("data: {"))[6:])
        controls = [client.post("/v1/chat/completions/control", json={"id": first["id"], "action": "reasoning_end"})
                    for _ in range(4)]  # whichever replica the gateway's call lands on
        replica = stream.headers["x-mlxcel-replica"]
    deadline = time.monotonic() + 60
    while not (found := client.post("/v1/streams/lookup", json={"conversation_ids": [conversation]}).json()) \
            or not found[0]["is_done"]:
        assert time.monotonic() < deadline, found
        time.sleep(0.2)
    replays = [client.get("/v1/stream", params={"conv_id": conversation}) for _ in range(4)]
    stopped = client.delete("/v1/stream", params={"conv_id": conversation})
    after = client.post("/v1/streams/lookup", json={"conversation_ids": [conversation]}).json()
    assert all(c.json() == {"success": False, "message": "reasoning control not enabled for this completion"}
               for c in controls), [c.text for c in controls]
    assert len(found) == 1 and found[0]["total_bytes"] > 0
    assert all(r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]") and
               r.headers["x-mlxcel-replica"] == replica for r in replays)
    assert len({r.text for r in replays}) == 1
    assert stopped.status_code == 204 and after == []


def _response_id(lines) -> str:
    for line in lines:
        if line.startswith("data: "):
            event = json.loads(line[6:])
            if event["type"] == "response.created":
                return event["response"]["id"]
    raise AssertionError("no response.created event")


def test_a_stream_is_cancelled_whichever_replica_the_cancel_reaches(client, cluster):
    """Two streamed responses running on the two replicas: each cancel is answered by
    the replica running it, so both end cancelled."""
    body = {"max_output_tokens": 3000, "stream": True, "ignore_eos": True}
    with contextlib.ExitStack() as streams:
        runs = []
        for topic in ("Rivers", "Volcanoes"):  # no prefix in common: the router spreads them by load
            stream = streams.enter_context(client.stream("POST", "/v1/responses", json={
                **body, "instructions": f"{topic} are your only subject.", "input": f"Write an essay on {topic}."}))
            assert stream.status_code == 200
            lines = stream.iter_lines()
            runs.append((stream.headers["x-mlxcel-replica"], _response_id(lines), lines))
        assert len({replica for replica, _, _ in runs}) == 2, "the two streams run on different replicas"
        for _, response_id, lines in runs:
            answer = client.post(f"/v1/responses/{response_id}/cancel")
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "cancelled"
            events = [json.loads(line[6:])["type"] for line in lines if line.startswith("data: ")]
            assert events[-1] == "response.incomplete", events[-3:]  # the stream ends, as cancelled
        for _, response_id, _ in runs:
            assert client.get(f"/v1/responses/{response_id}").json()["status"] == "cancelled"
    assert client.post("/v1/responses/resp_unknown/cancel").status_code == 404


def test_client_disconnect_frees_the_slot(client, cluster):
    for _ in range(4):  # 4 streams dropped after their first event, on 2 replicas of 2 slots
        with client.stream("POST", "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "Count slowly to one thousand."}],
                "max_tokens": 3000, "ignore_eos": True, "stream": True}) as stream:
            next(stream.iter_lines())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        busy = [r["server"]["concurrency"]["in_flight"] for r in client.get("/v1/metrics").json()["replicas"]]
        if sum(busy) == 0:
            break
        time.sleep(0.5)
    assert sum(busy) == 0, busy
    chat(client, [{"role": "user", "content": "Still there?"}])


def test_a_client_gone_before_a_whole_answer_starts_frees_the_slot(client, cluster):
    """Not streamed, the answer starts only once generated: the client leaves before."""
    for _ in range(4):  # 4 requests on 2 replicas of 2 slots, each long enough to run for many seconds
        with cluster.client(timeout=httpx.Timeout(60, read=1.5)) as gone, pytest.raises(httpx.ReadTimeout):
            gone.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Count to 1000."}],
                                                    "max_tokens": 3000, "ignore_eos": True})
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        busy = [r["server"]["concurrency"]["in_flight"] for r in client.get("/v1/metrics").json()["replicas"]]
        if sum(busy) == 0:
            break
        time.sleep(0.2)
    assert sum(busy) == 0, busy


def test_zz_killed_replica_ends_its_stream_and_comes_back(client, cluster):
    """Runs last in the module: it kills a replica; what was stored stays."""
    stored = client.post("/v1/responses", json={"input": "Name a sea.", "max_output_tokens": 4}).json()["id"]
    before = cluster.ready_replicas()
    with client.stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Write a very long story about rivers."}],
            "max_tokens": 3000, "ignore_eos": True, "stream": True}) as stream:
        victim = stream.headers["x-mlxcel-replica"]
        lines = stream.iter_lines()
        for line in lines:
            if line.startswith("data: ") and '"content"' in line:
                break
        os.kill(before[victim]["pid"], signal.SIGKILL)
        rest = [line for line in lines if line.startswith("data: ")]
    assert rest, "the stream must end with an event, not just stop"
    last = json.loads(rest[-1][6:])
    assert last["error"]["type"] == "server_error" and "failed" in last["error"]["message"]
    started = time.monotonic()
    for i in range(3):  # the survivor answers at once
        answer = chat(client, [{"role": "user", "content": f"Quick question {i}?"}])
        assert answer.headers["x-mlxcel-replica"] != victim
    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(cluster.ready_replicas()) < 2:
        time.sleep(1)
    replicas = cluster.ready_replicas()
    assert len(replicas) == 2 and victim not in replicas, replicas
    for _ in range(4):
        assert client.get(f"/v1/responses/{stored}").status_code == 200
