"""/metrics while the model loads answers llama-server's 503 "Loading model", as /slots
does, not an empty 200 a scraper would record as a healthy target with no series."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx

from tests.server_process import free_port


def test_metrics_while_loading_is_a_503(tmp_path):
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)  # a model "file" nobody writes yet: the server stays loading
    port = free_port()
    env = {**os.environ, "MLXCEL_STATE_URL": f"sqlite://{tmp_path}/state.sqlite3"}
    process = subprocess.Popen([sys.executable, "-m", "mlxcel", "serve", "-m", str(fifo), "--port", str(port),
                                "-t", "1", "--metrics"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.1)
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 503  # still loading
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"] == {"message": "Loading model", "type": "server_busy", "code": None}
        try:  # let the load fail: not a GGUF file
            with open(fifo, "wb", buffering=0) as pipe:
                pipe.write(b"not a gguf file")
        except BrokenPipeError:
            pass
        assert process.wait(30) == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
