"""llama-server's router mode (--models-dir): every GGUF of a folder served by name,
loaded on request (or only by POST /v1/keep with --no-models-autoload), at most
--models-max resident; the folder scanned again on /v1/reload. llama-server's router
routes: POST /models/load and /models/unload, each model's status in GET /models, the
status changes on GET /models/sse, GET /models?reload=1."""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
import sys
import threading
import time

import httpx
import pytest

from mlxcel.models.catalog import CATALOG
from mlxcel.models.store import model_path
from tests.server_process import ServerProcess


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    smol = model_path(CATALOG["smollm2-135m-instruct"])
    root = tmp_path_factory.mktemp("models")
    (root / "alpha.gguf").symlink_to(smol)
    (root / "beta").mkdir()
    (root / "beta" / "smol.gguf").symlink_to(smol)
    (root / "beta" / "mtp-head.gguf").write_bytes(b"a draft head: a companion, never a model")
    (root / "mmproj-alpha.gguf").write_bytes(b"a projector: a companion, never a model")
    (root / "notes.txt").write_text("not a model")
    return root


def _header_without_geometry() -> bytes:
    """A GGUF header that names an architecture and nothing else, as a projector's or an adapter's."""
    def string(text: str) -> bytes:
        return struct.pack("<Q", len(text)) + text.encode()
    kv = string("general.architecture") + struct.pack("<I", 8) + string("clip")
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + kv + b"\0" * 64


def _chat(client, model: str | None):
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    return client.post("/v1/chat/completions", json=body | ({"model": model} if model else {}))


def _resident(client) -> set[str]:
    return {m["id"] for m in client.get("/v1/models").json()["data"] if m.get("resident")}


def test_the_folder_s_models_by_name_at_most_models_max_resident(folder):
    proc = ServerProcess("-c", "512", "-np", "1", "--models-dir", str(folder), "--models-max", "1", model=None)
    try:
        proc.wait_ready()
        with proc.client() as client:
            listed = {m["id"] for m in client.get("/v1/models").json()["data"]}
            first = _chat(client, "alpha")
            after_alpha = _resident(client)
            second = _chat(client, "beta")
            after_beta = _resident(client)
            unnamed = _chat(client, None)
            unknown = _chat(client, "gamma")
            (folder / "gamma.gguf").symlink_to(folder / "alpha.gguf")
            (folder / "vision-proj.gguf").write_bytes(_header_without_geometry())  # a projector by another name
            try:
                reloaded = client.post("/v1/reload")
                listing = client.get("/v1/models")
                listed_after = {m["id"] for m in listing.json()["data"]}
                no_model = _chat(client, "vision-proj")
                third = _chat(client, "gamma")
            finally:
                (folder / "gamma.gguf").unlink()
                (folder / "vision-proj.gguf").unlink()
        log = proc.log()
    finally:
        proc.stop()
    assert listed == {"alpha", "beta"}
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert first.json()["model"] == "alpha" and second.json()["model"] == "beta"
    assert after_alpha == {"alpha"} and after_beta == {"beta"}  # --models-max 1: the least recent went
    assert unnamed.status_code == 400 and unnamed.json()["error"]["code"] == "model_required"
    assert unknown.status_code == 404
    assert reloaded.status_code == 200 and listing.status_code == 200, listing.text
    assert listed_after == {"alpha", "beta", "gamma", "vision-proj"}
    # a GGUF whose header holds no model: its load fails, for it alone (the listing was a 500)
    assert no_model.status_code == 503 and no_model.json()["error"]["code"] == "engine_failed", no_model.text
    assert third.status_code == 200
    assert "draft head is not used" in log


def test_without_autoload_only_keep_loads_a_model(folder):
    proc = ServerProcess("-c", "512", "-np", "1", "--models-dir", str(folder), "--no-models-autoload", model=None)
    try:
        proc.wait_ready()
        with proc.client() as client:
            refused = _chat(client, "alpha")
            kept = client.post("/v1/keep", json={"model": "alpha"})
            served = _chat(client, "alpha")
    finally:
        proc.stop()
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "model_not_loaded"
    assert kept.status_code == 200 and kept.json()["resident"] is True
    assert served.status_code == 200


def _status(client, model: str) -> dict:
    return next(m["status"] for m in client.get("/models").json()["data"] if m["id"] == model)


def _wait_status(client, model: str, value: str) -> dict:
    deadline = time.monotonic() + 120
    while (status := _status(client, model))["value"] != value:
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    return status


def test_llama_server_router_routes_load_unload_and_announce(folder):
    """With --no-models-autoload only an explicit load loads: POST /models/load, then
    /models/unload, each change announced on /models/sse in order, a failed load marked
    failed; llama-server's errors for unknown, running and idle models. A stop ends
    the /models/sse stream at once, cleanly (it was cut 3 s in, with a traceback)."""
    proc = ServerProcess("-c", "512", "-np", "1", "--models-dir", str(folder), "--no-models-autoload", model=None)
    events: list[dict] = []
    stream_ended = threading.Event()
    try:
        proc.wait_ready()
        listening = threading.Event()

        def listen() -> None:
            with contextlib.suppress(httpx.HTTPError):  # a cut stream
                with proc.client(timeout=None) as sse, sse.stream("GET", "/models/sse") as stream:
                    listening.set()
                    for line in stream.iter_lines():
                        if line.startswith("data: "):
                            events.append(json.loads(line[6:]))
                stream_ended.set()

        threading.Thread(target=listen, daemon=True).start()
        assert listening.wait(30)
        time.sleep(0.3)  # the subscription is made before the stream's first byte
        with proc.client() as client:
            before = _status(client, "alpha")
            loaded = client.post("/models/load", json={"model": "alpha"})
            again = client.post("/models/load", json={"model": "alpha"})
            unknown = client.post("/models/load", json={"model": "gamma"})
            hostile = [client.post("/models/load", content=body, headers={"content-type": "application/json"})
                       for body in (b"[]", b'{"model": 5}', b'{"model": ""}', b"{not json", rb'{"model": "\ud800"}')]
            running = _wait_status(client, "alpha", "loaded")
            served = _chat(client, "alpha")
            idle = client.post("/models/unload", json={"model": "beta"})
            unloaded = client.post("/models/unload", json={"model": "alpha"})
            after = _status(client, "alpha")
            (folder / "broken.gguf").write_bytes(b"GGUF but not really a model file")
            try:
                listed = {m["id"] for m in client.get("/models?reload=1").json()["data"]}
                broken = client.post("/models/load", json={"model": "broken"})
                failed = _wait_status(client, "broken", "unloaded") if broken.status_code == 200 else None
                deadline = time.monotonic() + 60
                while not any(e["model"] == "broken" and e["data"]["status"] == "unloaded" for e in events
                              if e["event"] == "model_status"):
                    assert time.monotonic() < deadline, events
                    time.sleep(0.1)
                failed = _status(client, "broken")
            finally:
                (folder / "broken.gguf").unlink()
            downloads = [client.post("/models", json={"model": "org/repo:Q4"}), client.delete("/models?model=alpha")]
    finally:
        proc.stop()
    assert stream_ended.wait(10)  # ended by the server, not cut
    assert "Traceback" not in proc.log_path.read_text(errors="replace")
    assert before == {"value": "unloaded"}
    assert loaded.status_code == 200 and loaded.json() == {"success": True}, loaded.text
    assert again.status_code == 400 and again.json()["error"]["message"] == "model is already running"
    assert unknown.status_code == 404 and unknown.json()["error"]["message"] == "model is not found"
    assert all(r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error" for r in hostile), \
        [r.text for r in hostile]
    assert running == {"value": "loaded"} and served.status_code == 200, served.text
    assert idle.status_code == 400 and idle.json()["error"]["message"] == "model is not running"
    assert unloaded.status_code == 200 and unloaded.json() == {"success": True} and after == {"value": "unloaded"}
    assert "broken" in listed and broken.status_code == 200
    assert failed["value"] == "unloaded" and failed.get("failed") is True
    assert all(r.status_code == 501 for r in downloads)
    alpha = [e["data"]["status"] for e in events if e["model"] == "alpha" and e["event"] == "model_status"]
    assert alpha == ["loading", "loaded", "unloaded"], events
    assert {"model": "*", "event": "models_reload"} in events
    broken_events = [e["data"] for e in events if e["model"] == "broken"]
    assert [e["status"] for e in broken_events] == ["loading", "unloaded"] and broken_events[-1]["failed"] is True


@pytest.mark.parametrize("make_args, message", [
    (lambda root: ["--models-dir", "/nonexistent/models"], "does not exist"),
    (lambda root: ["--models-dir", str(root / "beta" / "empty")], "holds no GGUF model"),
    (lambda root: ["--models-dir", str(root), "-m", "smollm2-135m-instruct"], "drop -m/--model"),
    (lambda root: ["--models-dir", str(root), "--config", str(root / "x.yaml")], "use one of them"),
    (lambda root: ["--models-dir", str(root), "--replicas", "2"], "single-process only"),
])
def test_a_folder_that_cannot_be_served_fails_the_start_in_one_line(folder, make_args, message):
    (folder / "beta" / "empty").mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "mlxcel", "serve", "--port", "0", *make_args(folder)],
                          capture_output=True, text=True, timeout=60, env={**os.environ})
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert done.returncode == 2 and len(errors) == 1 and message in errors[0], done.stderr[-2000:]
