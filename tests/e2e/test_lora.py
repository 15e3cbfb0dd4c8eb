"""LoRA adapters (--lora, --lora-scaled, --lora-init-without-apply, /lora-adapters and
a request's `lora` field) on SmolLM2 with a generated adapter: the scale changes the
greedy output; a change waits for running requests and drops the cached prefixes;
a request asking for other scales, a bad id or a bad body is a 400."""

from __future__ import annotations

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


def test_the_scale_changes_the_output_and_a_change_drops_the_cache(lora_server, adapter):
    with lora_server.client() as client:
        listed = client.get("/lora-adapters").json()
        applied = _text(client)
        assert _set(client, 0.0) == {"success": True}
        plain = _text(client)
        plain_again = _text(client)  # its prefix cached under scale 0 now
        _set(client, 1.0)
        applied_again = _text(client)  # a stale prefix would give the plain text
        rows = client.get("/lora-adapters").json()
    assert listed == [{"id": 0, "path": str(adapter), "scale": 1.0, "task_name": "test-task", "prompt_prefix": ""}]
    assert applied != plain and plain == plain_again and applied_again == applied
    assert rows[0]["scale"] == 1.0


def test_a_change_waits_for_the_running_request(lora_server):
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
        _set(client, 0.0)  # answered once the running request has ended
        worker.join(60)
        after = _text(client, n_predict=40, ignore_eos=True, cache_prompt=False)
        _set(client, 1.0)
    assert result["text"] == applied  # all of it under the old scale
    assert after != applied


def test_requests_that_ask_for_other_scales_or_bad_ids_are_refused(lora_server):
    with lora_server.client() as client:
        _set(client, 1.0)
        same = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "lora": [{"id": 0, "scale": 1.0}]})
        other = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "lora": [{"id": 0, "scale": 0.5}]})
        chat = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}],
                                                         "max_tokens": 2, "lora": []})
        bad = [client.post("/lora-adapters", json=body) for body in
               ({"id": 0}, [{"id": 1, "scale": 1}], [{"id": "0", "scale": 1}], [{"id": True}],
                [{"id": 0, "scale": "x"}], [3])]
        nan = client.post("/lora-adapters", content=b'[{"id": 0, "scale": NaN}]')
        unknown = client.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "lora": [{"id": 7, "scale": 1}]})
        still = _text(client, n_predict=2)
    assert same.status_code == 200
    assert other.status_code == 400 and "POST /lora-adapters" in other.json()["error"]["message"]
    assert chat.status_code == 400  # an empty list asks for every scale 0
    assert all(answer.status_code == 400 for answer in bad) and nan.status_code == 400
    assert unknown.status_code == 400 and "invalid adapter id" in unknown.json()["error"]["message"]
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
