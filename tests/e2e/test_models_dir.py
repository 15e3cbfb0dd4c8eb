"""llama-server's router mode (--models-dir): every GGUF of a folder served by name,
loaded on request (or only by POST /v1/keep with --no-models-autoload), at most
--models-max resident; the folder scanned again on /v1/reload."""

from __future__ import annotations

import os
import subprocess
import sys

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
            try:
                reloaded = client.post("/v1/reload")
                listed_after = {m["id"] for m in client.get("/v1/models").json()["data"]}
                third = _chat(client, "gamma")
            finally:
                (folder / "gamma.gguf").unlink()
        log = proc.log()
    finally:
        proc.stop()
    assert listed == {"alpha", "beta"}
    assert first.status_code == second.status_code == 200, (first.text, second.text)
    assert first.json()["model"] == "alpha" and second.json()["model"] == "beta"
    assert after_alpha == {"alpha"} and after_beta == {"beta"}  # --models-max 1: the least recent went
    assert unnamed.status_code == 400 and unnamed.json()["error"]["code"] == "model_required"
    assert unknown.status_code == 404
    assert reloaded.status_code == 200 and listed_after == {"alpha", "beta", "gamma"}
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
