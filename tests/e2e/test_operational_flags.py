"""llama-server's operational flags, each doing what llama-server's does: --log-prompts-dir
writes each completion's prompt to a file; -lv/--log-verbosity drops the lines above
its level; --reuse-port lets another socket bind the port; --check-tensors finds a
model's invalid weights while it loads; --offline never downloads; --usage prints the
help and --completion-bash a completion script that bash can source; --metrics-port serves
/metrics alone on a port of its own. The spec's routes for models llama.cpp cannot run
(image generation, structured decisions) answer 501 naming what they need, and
--image-model is refused in one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import httpx
import pytest

from tests.fixtures.rerank_model import write_rerank_model
from tests.server_process import ServerProcess, free_port

pytestmark = pytest.mark.slow


def _serve(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlxcel", "serve", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_prompts_logged_quiet_log_and_a_shared_port(tmp_path):
    folder = tmp_path / "prompts" / "nested"  # made if missing
    proc = ServerProcess("-c", "1024", "-np", "1", "--log-prompts-dir", str(folder), "-lv", "2", "--reuse-port",
                         "--check-tensors")
    try:
        proc.wait_ready()
        with proc.client() as client:
            completion = client.post("/completion", json={"prompt": "Tell me about owls.", "n_predict": 2})
            chat = client.post("/v1/chat/completions", json={"max_tokens": 2, "messages": [
                {"role": "user", "content": "What do herons eat?"}]})
            several = client.post("/v1/completions", json={"prompt": ["first prompt", "second prompt"],
                                                            "max_tokens": 1})
        # another socket binds the server's own port: both set SO_REUSEPORT
        other = socket.socket()
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            other.bind(("127.0.0.1", proc.port))
        finally:
            other.close()
        log = proc.log()
    finally:
        proc.stop()
    assert completion.status_code == chat.status_code == several.status_code == 200
    files = sorted(folder.iterdir())
    texts = [f.read_text() for f in files]
    assert len(files) == 3 and all(f.name.split(".")[0].split("-")[0].isdigit() for f in files), files
    assert "Tell me about owls." in texts[0]
    assert "What do herons eat?" in texts[1] and "<|im_start|>user" in texts[1]  # as the template rendered it
    assert [p.strip() for p in json.loads(texts[2])] == ["first prompt", "second prompt"]
    assert " INFO " not in log and "listening on" not in log, log[-2000:]  # -lv 2: warnings and errors only


def test_without_reuse_port_the_port_is_the_server_s_alone(http):
    sock = socket.socket()
    try:
        with pytest.raises(OSError):
            sock.bind(("127.0.0.1", int(http.base_url.port)))
    finally:
        sock.close()


def test_check_tensors_refuses_a_model_with_invalid_weights(tmp_path):
    poisoned = write_rerank_model(tmp_path / "poisoned.gguf", poisoned=True)
    checked = _serve("--reranking", "-m", str(poisoned), "--check-tensors", "--port", "0")
    assert checked.returncode == 1
    assert "invalid" in checked.stderr.lower() and "Traceback" not in checked.stderr, checked.stderr[-2000:]
    unchecked = ServerProcess("--reranking", model=str(poisoned))
    try:
        unchecked.wait_ready()  # the same file loads without the check
    finally:
        unchecked.stop()


def test_offline_never_downloads_a_model_not_pulled(tmp_path):
    result = _serve("-m", "qwen2.5-coder-0.5b-instruct", "--offline", "--port", "0",
                    env={"MLXCEL_HOME": str(tmp_path), "MLXCEL_STATE_URL": f"sqlite://{tmp_path}/s.sqlite3"})
    assert result.returncode == 1
    assert "--offline forbids fetching it" in result.stderr and "mlxcel pull qwen2.5-coder-0.5b-instruct" in \
        result.stderr, result.stderr[-2000:]
    assert not any(p.suffix == ".gguf" or p.name.endswith(".part") for p in tmp_path.rglob("*")), \
        list(tmp_path.rglob("*"))


def test_usage_and_bash_completion():
    usage = _serve("--usage")
    completion = _serve("--completion-bash")
    assert usage.returncode == 0 and "--ctx-size" in usage.stdout and "--sleep-idle-seconds" in usage.stdout
    assert completion.returncode == 0
    script = completion.stdout
    check = subprocess.run(["bash", "-c", script + '\nCOMP_WORDS=(mlxcel-server --sleep-i); COMP_CWORD=1; '
                            '_mlxcel_complete_serve; echo "${COMPREPLY[@]}"\n'
                            'COMP_WORDS=(mlxcel se); COMP_CWORD=1; _mlxcel_complete; echo "${COMPREPLY[@]}"\n'
                            'COMP_WORDS=(mlxcel-server -m ""); COMP_CWORD=2; cd / && _mlxcel_complete_serve; '
                            'echo "${#COMPREPLY[@]}"'],
                           capture_output=True, text=True, timeout=30)
    lines = check.stdout.splitlines()
    assert check.returncode == 0 and lines[:2] == ["--sleep-idle-seconds", "serve"], (check.stdout, check.stderr)
    assert int(lines[2]) > 3  # -m completes file names


def test_metrics_port_serves_metrics_alone_with_the_api_s_key():
    metrics_port = free_port()
    proc = ServerProcess("-c", "512", "-np", "1", "--metrics-port", str(metrics_port), "--api-key", "sekrit")
    key = {"Authorization": "Bearer sekrit"}
    try:
        proc.wait_ready()
        with httpx.Client(base_url=f"http://127.0.0.1:{metrics_port}", timeout=30) as side, proc.client() as api:
            api.post("/completion", json={"prompt": "Hi", "n_predict": 2}, headers=key)
            scraped = side.get("/metrics", headers=key)
            keyless = side.get("/metrics")
            elsewhere = [side.get("/health", headers=key), side.get("/v1/models", headers=key),
                         side.post("/v1/chat/completions", headers=key, json={"messages": []})]
            main = api.get("/metrics", headers=key)
    finally:
        proc.stop()
    assert scraped.status_code == 200 and "llamacpp:tokens_predicted_total" in scraped.text
    assert keyless.status_code == 401
    assert [r.status_code for r in elsewhere] == [404, 404, 404]
    assert main.status_code == 200  # --metrics-port turns /metrics on where the API is too


@pytest.mark.parametrize("path, needle", [
    ("/v1/images/generations", "--image-model"), ("/images/edits", "--image-model"),
    ("/v1/systemone", "DiffusionGemma"), ("/systemone", "DiffusionGemma"),
])
def test_routes_for_models_llama_cpp_cannot_run_answer_501_naming_them(http, path, needle):
    answer = http.post(path, json={"prompt": "a cat"})
    assert answer.status_code == 501
    error = answer.json()["error"]
    assert error["code"] == "not_implemented" and needle in error["message"]


def test_realtime_voice_chat_answers_501_to_a_request_and_to_a_websocket_handshake(server, http):
    from websockets.exceptions import InvalidStatus
    from websockets.sync.client import connect

    plain = http.get("/v1/realtime")
    assert plain.status_code == 501 and "Nemotron VoiceChat" in plain.json()["error"]["message"]
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{server.port}/v1/realtime?model=x", open_timeout=30)
    response = refused.value.response
    assert response.status_code == 501
    assert json.loads(response.body)["error"] == plain.json()["error"]
    assert http.get("/health").status_code == 200


def test_the_web_ui_s_cors_proxy_is_disabled_as_in_llama_server(http):
    for answer in (http.get("/cors-proxy", params={"url": "http://example.com"}),
                   http.post("/cors-proxy", json={"url": "http://example.com"})):
        assert answer.status_code == 403
        assert answer.json()["error"] == {"message": "this feature is disabled", "type": "feature_disabled",
                                          "code": None}


@pytest.mark.parametrize("args, env", [(["--image-model", "sd.gguf"], None), ([], {"MLXCEL_IMAGE_MODEL": "sd.gguf"})])
def test_image_model_is_refused_in_one_line(args, env):
    result = _serve(*args, env=env, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "image generation needs a diffusion checkpoint" in lines[0]
