"""The command line as a user meets it: errors in one line, --help, start-up states."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from mlxcel.engine.weight_buffers import amx_would_hold_weights
from tests.server_process import DEFAULT_MODEL, ServerProcess, free_port


def _serve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlxcel", "serve", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize(
    "args, env, needle",
    [
        (["-c", "abc"], None, "ctx-size"),
        (["-np", "0"], None, "parallel"),
        (["--top-p", "2"], None, "top-p"),
        (["--port", "70000"], None, "port"),
        (["-m", "/no/such/model.gguf"], None, "/no/such/model.gguf"),
        (["--no-such-flag"], None, "--no-such-flag"),
        ([], {"LLAMA_ARG_CTX_SIZE": "lots"}, "LLAMA_ARG_CTX_SIZE"),
        (["--api-key-file", "/no/such/file"], None, "api-key-file"),
        (["--lora", "adapter.gguf"], None, "--lora"),
        (["--mmproj", "proj.gguf"], None, "--mmproj"),
        (["--grammar-file", "g.gbnf"], None, "--grammar-file"),
        (["--samplers", "top_k;bogus"], None, "bogus"),
        (["-ctk", "q3_bogus"], None, "cache-type-k"),
        (["--state-url", "mongodb://host/db"], None, "state-url"),
        (["--state-url", "sqlite:///"], {"MLXCEL_STATE_URL": "ftp://x"}, "MLXCEL_STATE_URL"),
    ],
)
def test_bad_values_fail_in_one_line(args, env, needle):
    result = _serve(*args, env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr



def test_a_context_past_the_machine_s_memory_is_refused_in_one_line():
    """-c 2000000000 (in llama.cpp's int range) made llama.cpp build a cell table and a
    cache that grew until the kernel killed the process (4.4 GB and climbing); the start
    now ends in one line naming what the cache would need, before any of it is made."""
    started = time.monotonic()
    result = _serve("-m", DEFAULT_MODEL, "-c", "2000000000", "--port", str(free_port()))
    assert result.returncode == 1, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("mlxcel: error:")]
    assert len(lines) == 1 and "a KV cache of 2000000000 tokens" in lines[0] and "lower -c" in lines[0], lines
    assert "Traceback" not in result.stderr and time.monotonic() - started < 30


@pytest.mark.parametrize("flag, noun", [("--embedding-model", "embedding"), ("--rerank-model", "rerank")])
def test_a_side_model_that_cannot_load_ends_the_start_in_one_line(tmp_path, flag, noun):
    """A model served beside the chat model loads on a thread of its own; a file llama.cpp
    refuses ends the server with one line naming which model, not a traceback."""
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    result = _serve("-m", DEFAULT_MODEL, flag, str(bad), "--port", str(free_port()))
    assert result.returncode == 1, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("mlxcel: error:")]
    assert len(lines) == 1 and f"could not load the {noun} model: " in lines[0] and str(bad) in lines[0], lines
    assert "Traceback" not in result.stderr

def test_help_documents_flags_and_environment():
    result = _serve("--help")
    assert result.returncode == 0
    for text in ("--ctx-size", "LLAMA_ARG_CTX_SIZE", "--parallel", "--api-key", "--no-cache-prompt", "--metrics",
                 "--top-k", "--repeat-last-n", "--seed", "LLAMA_ARG_N_PARALLEL"):
        assert text in result.stdout


def test_server_entry_point_and_llama_server_flags(tmp_path):
    """mlxcel-server takes a llama-server command line: unknown-to-us flags warn once."""
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    port = free_port()
    binary = os.path.join(os.path.dirname(sys.executable), "mlxcel-server")
    process = subprocess.Popen(
        [binary, "-m", str(fifo), "--port", str(port), "--jinja", "-fa", "on", "-ctk", "q8_0", "--no-kv-offload",
         "--cache-reuse", "256", "--threads-http", "4", "-cb", "-dt", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        status = None
        while time.monotonic() < deadline:
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        # the model "file" is a pipe nobody writes yet: the server is up and still loading
        assert status is not None and status.status_code == 503
        assert status.json() == {"status": "loading model"}
        busy = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "x"})
        assert busy.status_code == 503 and busy.json()["error"]["type"] == "server_busy"
        try:  # feed it something that is not a GGUF file
            with open(fifo, "wb", buffering=0) as pipe:
                pipe.write(b"not a gguf file")
        except BrokenPipeError:
            pass  # the loader read enough to give up before the write finished
        assert process.wait(30) == 1
        output = process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
    warnings = [line for line in output.splitlines() if "ignored llama-server flags" in line]
    assert len(warnings) == 1
    for flag in ("--no-kv-offload", "--threads-http", "-cb"):
        assert flag in warnings[0]
    assert "--jinja" not in warnings[0] and "--cache-reuse" not in warnings[0]  # implemented, so not named
    assert "-dt (deprecated in llama-server too" in warnings[0]  # as llama-server says of it
    assert "-fa" not in warnings[0].split(":")[-1].split()
    assert "could not load the model" in output
    assert "Traceback" not in output
    # where llama.cpp's AMX kernels would hold the weights (they crash), they are skipped
    # by default (only CPU_REPACK takes weights), said in one line; elsewhere nothing is said
    repack_lines = [line for line in output.splitlines() if "weight repacking without AMX" in line]
    assert len(repack_lines) == (1 if amx_would_hold_weights() else 0), output


def test_environment_variables_configure_the_server():
    proc = ServerProcess(env={"LLAMA_ARG_N_PARALLEL": "2", "LLAMA_ARG_CTX_SIZE": "1024", "LLAMA_ARG_ALIAS": "tiny",
                              "LLAMA_ARG_TEMPERATURE": "0.25", "LLAMA_ARG_CACHE_PROMPT": "false",
                              "MLXCEL_TOOL_CALL_PARSER": "hermes"})
    try:
        proc.wait_ready()
        with proc.client() as client:
            health = client.get("/health").json()
            props = client.get("/props").json()
            repeats = [client.post("/completion", json={"prompt": "Same prompt every time, please.", "n_predict": 1,
                                                        "cache_prompt": True}).json() for _ in range(3)]
    finally:
        proc.stop()
    assert health["model"] == "tiny"
    assert health["tool_call_parser"] == "mlxcel"  # SmolLM2's template has no tools; the override does
    assert health["batch"]["max_batch_size"] == 2 and health["context_size"] == 512
    assert props["default_generation_settings"]["temperature"] == 0.25
    # the server-wide --no-cache-prompt wins over a request's cache_prompt: true
    assert [r["timings"]["cache_n"] for r in repeats] == [0, 0, 0]


def test_sampling_and_cache_flags_shape_what_is_served():
    """llama-server's sampling flags become the defaults every request starts from,
    and a quantized KV cache serves."""
    proc = ServerProcess("-c", "512", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "--temp", "0", "--no-mmap",
                         "--swa-full",
                         "--samplers", "penalties;top_k;temperature", "--mirostat", "0", "--dynatemp-range", "0.3",
                         "-r", ".", "--ignore-eos", "-l", "30-inf")
    try:
        proc.wait_ready()
        with proc.client() as client:
            settings = client.get("/props").json()["default_generation_settings"]
            body = client.post("/completion", json={"prompt": "The capital of France is", "n_predict": 24}).json()
            own_stop = client.post("/completion", json={"prompt": "The capital of France is", "n_predict": 24,
                                                        "stop": ["\n"]}).json()
    finally:
        proc.stop()
    assert settings["samplers"] == ["penalties", "top_k", "temperature"]
    assert settings["dynatemp_range"] == pytest.approx(0.3)
    assert body["generation_settings"]["ignore_eos"] is True
    # token 30 is "." and banned by -l: the default stop string "." can then never be produced
    assert "." not in body["content"] and body["stop_type"] == "limit"
    assert own_stop["generation_settings"]["stop"] == ["\n"]


def test_mlock_reaches_llama_cpp():
    """--mlock asks llama.cpp to lock the model in RAM: either the pages are locked
    (VmLck) or llama.cpp says why not (RLIMIT_MEMLOCK): never silently ignored."""
    proc = ServerProcess("-c", "512", "-np", "1", "--mlock")
    try:
        proc.wait_ready()
        status = open(f"/proc/{proc.process.pid}/status").read()
        locked_kib = int(status.split("VmLck:")[1].split()[0])
        with proc.client() as client:
            answer = client.post("/completion", json={"prompt": "Hello", "n_predict": 4}).json()
        log = proc.log()
    finally:
        proc.stop()
    assert "ignored llama-server flags" not in log
    assert locked_kib > 50_000 or "failed to mlock" in log
    assert answer["tokens_predicted"] == 4
