"""LoRA adapters (--lora, --lora-scaled, --lora-init-without-apply, /lora-adapters and
a request's `lora` field) on SmolLM2 with a generated adapter: the scale changes the
greedy output; a cached prefix is reused only under the scales it was computed with;
a change leaves running requests their scales; requests of different scales run side
by side, each as it runs alone; a bad id or a bad body is a 400."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from tests.fixtures.lora_adapter import write_lora_adapter
from tests.server_process import ServerProcess

PROMPT = "The three primary colors are"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory):
    return write_lora_adapter(tmp_path_factory.mktemp("lora") / "adapter.gguf")


@pytest.fixture(scope="module")
def lora_server(adapter):
    proc = ServerProcess("-c", "1024", "-np", "2", "--lora-scaled", f"{adapter}:1.0")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _text(client, n_predict: int = 12, **extra) -> str:
    answer = client.post("/completion", json={"prompt": PROMPT, "n_predict": n_predict, "temperature": 0, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()["content"]


def _set(client, scale: float):
    answer = client.post("/lora-adapters", json=[{"id": 0, "scale": scale}])
    assert answer.status_code == 200, answer.text
    return answer.json()


def _answer(client, **extra) -> tuple[str, int]:
    """The greedy text and how many prompt tokens were reused (timings.cache_n)."""
    answer = client.post("/completion", json={"prompt": PROMPT, "n_predict": 12, "temperature": 0, **extra})
    assert answer.status_code == 200, answer.text
    return answer.json()["content"], answer.json()["timings"]["cache_n"]


def test_the_scale_changes_the_output(lora_server, adapter):
    with lora_server.client() as client:
        listed = client.get("/lora-adapters").json()
        applied = _text(client, cache_prompt=False)
        assert _set(client, 0.0) == {"success": True}
        plain = _text(client, cache_prompt=False)
        asked = [_text(client, cache_prompt=False, lora=[{"id": 0, "scale": scale}]) for scale in (1.0, 0.0)]
        reported = client.post("/completion", json={"prompt": PROMPT, "n_predict": 1,
                                                    "lora": [{"id": 0, "scale": 0.5}]}).json()["generation_settings"]
        unasked = client.post("/completion", json={"prompt": PROMPT, "n_predict": 1}).json()["generation_settings"]
        _set(client, 1.0)
        applied_again = _text(client, cache_prompt=False)
        rows = client.get("/lora-adapters").json()
    assert listed == [{"id": 0, "path": str(adapter), "scale": 1.0, "task_name": "test-task", "prompt_prefix": ""}]
    assert applied != plain and applied_again == applied
    assert asked == [applied, plain]  # a request's own scales, whatever the server's
    assert reported["lora"] == [{"id": 0, "scale": 0.5}] and unasked["lora"] == []  # as llama-server reports them
    assert rows[0]["scale"] == 1.0


def test_a_prefix_is_reused_only_under_the_scales_it_was_computed_with(lora_server):
    with lora_server.client() as client:
        _set(client, 1.0)
        _answer(client)  # the prompt cached under 1.0
        first_plain, first_plain_cached = _answer(client, lora=[{"id": 0, "scale": 0.0}])
        again_plain, again_plain_cached = _answer(client, lora=[{"id": 0, "scale": 0.0}])
        _, applied_cached = _answer(client)
        _set(client, 0.0)
        server_plain, server_plain_cached = _answer(client)  # the server's scale is 0 now: 0's prefix serves
        _set(client, 1.0)
    assert first_plain_cached == 0  # 1.0's prefix is not taken for a request of scale 0
    assert again_plain_cached > 0 and applied_cached > 0 and server_plain_cached > 0
    assert again_plain == first_plain == server_plain


def test_a_change_leaves_the_running_request_its_scale(lora_server):
    with lora_server.client() as client:
        _set(client, 1.0)
        # computed from scratch each time: this adapter's output is noise, which a reused
        # prefix (computed in another batch shape) can tip at a near tie
        applied = _text(client, n_predict=40, ignore_eos=True, cache_prompt=False)
        result: dict = {}

        def stream():
            with lora_server.client() as other:
                result["text"] = _text(other, n_predict=40, ignore_eos=True, cache_prompt=False)

        worker = threading.Thread(target=stream)
        worker.start()
        deadline = time.monotonic() + 30
        while not any(slot["is_processing"] for slot in client.get("/slots").json()) and time.monotonic() < deadline:
            time.sleep(0.005)
        _set(client, 0.0)  # answered at once: the running request keeps its scale
        worker.join(60)
        after = _text(client, n_predict=40, ignore_eos=True, cache_prompt=False)
        _set(client, 1.0)
    assert result["text"] == applied  # all of it under the old scale
    assert after != applied


def test_requests_of_different_scales_run_side_by_side_each_as_alone(lora_server):
    """Each step decodes one set's slots and the sets take turns (of 0.4 s: 160 tokens
    take several), so each request's batches are the ones it has alone: the same
    greedy text, token for token."""
    asks = [None, [{"id": 0, "scale": 0.0}]]

    def body(lora):
        extra = {} if lora is None else {"lora": lora}
        return {"prompt": PROMPT, "n_predict": 160, "temperature": 0, "ignore_eos": True, "cache_prompt": False,
                **extra}

    with lora_server.client() as client:
        _set(client, 1.0)
        alone = [client.post("/completion", json=body(lora)).json()["content"] for lora in asks]
        _text(client, n_predict=2, lora=[{"id": 0, "scale": 0.25}])  # a scale no other test asks for
        slot_scales = [slot["lora"] for slot in client.get("/slots").json()]
    assert [{"id": 0, "scale": 0.25}] in slot_scales  # /slots shows the scales each slot holds
    streams: dict[int, tuple[float, float, str]] = {}  # first token's time, last's, the text

    def run(index: int) -> None:
        times, parts = [], []
        with lora_server.client() as own, own.stream("POST", "/completion",
                                                     json={**body(asks[index]), "stream": True}) as answer:
            for line in answer.iter_lines():
                if line.startswith("data: ") and (content := json.loads(line[6:]).get("content")):
                    times.append(time.monotonic())
                    parts.append(content)
        streams[index] = (times[0], times[-1], "".join(parts))

    workers = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    # both were decoding at once: neither set waited for the other's request to end
    assert max(first for first, _, _ in streams.values()) < min(last for _, last, _ in streams.values())
    assert [streams[i][2] for i in range(2)] == alone
    assert alone[0] != alone[1]


def test_bad_ids_and_bad_bodies_are_refused(lora_server):
    with lora_server.client() as client:
        _set(client, 1.0)
        same = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "lora": [{"id": 0, "scale": 1.0}]})
        other = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "lora": [{"id": 0, "scale": 0.5}]})
        chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                         "max_tokens": 2, "lora": []})
        chat_nan = client.post("/v1/chat/completions", content=b'{"messages": [{"role": "user", "content": "Hi"}], '
                               b'"max_tokens": 2, "lora": [{"id": 0, "scale": NaN}]}',
                               headers={"content-type": "application/json"})
        bad = [client.post("/lora-adapters", json=body) for body in
               ({"id": 0}, [{"id": 1, "scale": 1}], [{"id": "0", "scale": 1}], [{"id": True}],
                [{"id": 0, "scale": "x"}], [3], [{"id": 0, "scale": 1e300}])]
        nan = client.post("/lora-adapters", content=b'[{"id": 0, "scale": NaN}]')
        unknown = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "lora": [{"id": 7, "scale": 1}]})
        # float32 inf in llama.cpp's graph killed the process; the bound answers first
        huge = [client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "lora": [{"id": 0, "scale": s}]})
                for s in (1e300, -1e300, 1e38)]
        still = _text(client, n_predict=2)
    assert same.status_code == 200 and other.status_code == 200
    assert chat.status_code == 200  # an empty list runs with the server's scales, as in llama-server
    assert chat_nan.status_code == 400
    assert all(answer.status_code == 400 for answer in bad) and nan.status_code == 400
    assert unknown.status_code == 400 and "invalid adapter id" in unknown.json()["error"]["message"]
    assert all(answer.status_code == 400 and "within" in answer.json()["error"]["message"] for answer in huge)
    assert still


def test_init_without_apply_loads_with_scale_zero(adapter, http):
    proc = ServerProcess("-c", "512", "-np", "1", "--lora", str(adapter), "--lora-init-without-apply")
    try:
        proc.wait_ready()
        with proc.client() as client:
            rows = client.get("/lora-adapters").json()
    finally:
        proc.stop()
    assert [row["scale"] for row in rows] == [0.0]
    assert http.get("/lora-adapters").json() == []


def test_the_scales_set_survive_a_sleep(adapter):
    """--sleep-idle-seconds: a model woken from sleep runs with the scales POST
    /lora-adapters set before it slept, not with the command line's."""
    proc = ServerProcess("-c", "512", "-np", "1", "--lora-scaled", f"{adapter}:1.0", "--sleep-idle-seconds", "1")
    try:
        proc.wait_ready()
        with proc.client() as client:
            applied = _text(client, cache_prompt=False)
            _set(client, 0.0)
            plain = _text(client, cache_prompt=False)
            deadline = time.monotonic() + 60
            while not client.get("/props").json()["is_sleeping"]:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            woken = _text(client, cache_prompt=False)
            rows = client.get("/lora-adapters").json()
    finally:
        proc.stop()
    assert applied != plain and woken == plain
    assert [row["scale"] for row in rows] == [0.0]


@pytest.mark.parametrize("make_args, message", [
    (lambda adapter: ["--lora", "/nonexistent/adapter.gguf"], "no such file"),
    (lambda adapter: ["--lora-scaled", f"{adapter}"], "FNAME:SCALE"),
    (lambda adapter: ["--lora-scaled", f"{adapter}:inf"], "finite"),
])
def test_bad_adapter_flags_fail_the_start_in_one_line(adapter, make_args, message):
    done = subprocess.run([sys.executable, "-m", "mlxcel", "serve", "--port", "0", *make_args(adapter)],
                          capture_output=True, text=True, timeout=60)
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 2 and len(errors) == 1 and message in errors[0], done.stderr[-2000:]


def test_a_file_that_is_not_an_adapter_fails_the_load(tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\x00" * 64)
    done = subprocess.run([sys.executable, "-m", "mlxcel", "serve", "--port", "0", "-c", "512", "--lora", str(junk)],
                          capture_output=True, text=True, timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("mlxcel: error:")]
    assert done.returncode == 1 and len(errors) == 1 and "LoRA adapter" in errors[0], done.stderr[-2000:]


def test_a_config_files_model_takes_its_adapters(tmp_path, adapter):
    """`adapter` in a --config model: loaded with that model alone, listed and set per
    model (`?model=`), and a request's `lora` works there as with --lora."""
    config = tmp_path / "fleet.yaml"
    config.write_text(f"models:\n  tuned:\n    path: smollm2-135m-instruct\n    adapter: {adapter}\n"
                      "  plain:\n    path: smollm2-135m-instruct\n")
    proc = ServerProcess("--config", str(config), model=None)
    try:
        proc.wait_ready(health_path="/health?ready=1")
        with proc.client(timeout=120) as client:
            def text(model: str, **extra) -> str:
                answer = client.post("/completion", json={"model": model, "prompt": PROMPT, "n_predict": 12,
                                                          "temperature": 0, "cache_prompt": False, **extra})
                assert answer.status_code == 200, answer.text
                return answer.json()["content"]

            listed = {}
            tuned, tuned_at_zero = text("tuned"), text("tuned", lora=[{"id": 0, "scale": 0.0}])
            listed["tuned"] = client.get("/lora-adapters?model=tuned").json()
            plain = text("plain")  # loaded now, if it was not yet
            listed["plain"] = client.get("/lora-adapters?model=plain").json()
            refused = client.post("/completion", json={"model": "plain", "prompt": PROMPT, "n_predict": 2,
                                                       "lora": [{"id": 0, "scale": 1.0}]})
    finally:
        proc.stop()
    assert [row["path"] for row in listed["tuned"]] == [str(adapter)] and listed["plain"] == [], listed
    assert tuned != plain and tuned_at_zero == plain
    assert refused.status_code == 400 and "invalid adapter id" in refused.json()["error"]["message"]
