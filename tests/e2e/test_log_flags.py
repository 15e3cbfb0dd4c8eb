"""llama-server's logging and information flags on a real server: --log-file,
--log-colors, --no-log-timestamps, --no-log-prefix, --log-jsonl and --log-disable shape
what the server writes (uvicorn's own lines included); --list-devices and --cache-list
print and exit; flags llama-server removed are refused with its pointer. Every server
here is stopped with SIGINT (Ctrl-C), which must end it cleanly: exit status 0, no
traceback."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.server_process import DEFAULT_MODEL, free_port

pytestmark = pytest.mark.slow
ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def _run_server(tmp_path, *flags: str) -> tuple[str, str]:
    """Start a server with `flags`, wait for it, send it one malformed request (uvicorn
    logs it) and one good one, stop it; its stdout and stderr."""
    port = free_port()
    out, err = tmp_path / f"out-{port}.txt", tmp_path / f"err-{port}.txt"
    env = {**os.environ, "MLXCEL_STATE_URL": f"sqlite://{tmp_path}/state-{port}.sqlite3"}
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "mlxcel", "serve", "-m", DEFAULT_MODEL, "-c", "1024",
                                    "-np", "1", "-t", "2", "--port", str(port), *flags],
                                   stdout=stdout, stderr=stderr, env=env)
        try:
            deadline = time.monotonic() + 120
            while True:
                assert process.poll() is None, err.read_text()
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, err.read_text()
                time.sleep(0.1)
            with socket.create_connection(("127.0.0.1", port)) as raw:
                raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
                raw.recv(4096)
            assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
    stdout_text, stderr_text = out.read_text(errors="replace"), err.read_text(errors="replace")
    assert process.returncode == 0 and "Traceback" not in stderr_text, stderr_text[-3000:]
    return stdout_text, stderr_text


def _listening(lines: list[str]) -> list[str]:
    return [line for line in lines if "mlxcel listening on" in line]


def test_log_file_colors_and_no_timestamps(tmp_path):
    log_file = tmp_path / "server.log"
    _, err = _run_server(tmp_path, "--log-file", str(log_file), "--log-colors", "on", "--no-log-timestamps")
    console = err.splitlines()
    written = log_file.read_text().splitlines()
    assert _listening(console) and _listening(written)
    # the console's levels are colored as llama.cpp colors them; the file's are plain
    assert "\x1b[32mINFO\x1b[0m mlxcel: mlxcel listening on" in _listening(console)[0]
    assert _listening(written)[0].startswith("INFO mlxcel: mlxcel listening on")
    assert not any(ESCAPE.search(line) for line in written)
    assert [ESCAPE.sub("", line) for line in console if "mlxcel" in line] == [line for line in written
                                                                             if "mlxcel" in line]
    # uvicorn's own warning goes through the same handlers and format
    assert any(line.startswith("WARNING uvicorn.error: Invalid HTTP request") for line in written), written


def test_no_prefix_leaves_the_bare_message(tmp_path):
    _, err = _run_server(tmp_path, "--no-log-prefix", "-mmdev", "none")
    assert _listening(err.splitlines())[0].startswith("mlxcel listening on http://127.0.0.1:")
    # the projector's device is a placement flag: accepted, and named as ignored
    assert "accepted and ignored llama-server flags (not applicable to mlxcel): -mmdev" in err.splitlines()


def test_jsonl_goes_to_stdout_as_llama_cpp_objects(tmp_path):
    out, err = _run_server(tmp_path, "--log-jsonl", "--log-colors", "on")
    records = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert records and all(set(r) == {"type", "time", "level", "msg", "logger"} for r in records)
    assert all(r["type"] == "log" and isinstance(r["time"], int) and r["time"] >= 0 for r in records)
    assert {r["level"] for r in records} <= {"debug", "info", "warn", "error"}
    assert any(r["msg"].startswith("mlxcel listening on") and r["level"] == "info" for r in records)
    assert any(r["logger"] == "uvicorn.error" and r["level"] == "warn" for r in records)
    assert "\x1b[" not in out  # JSONL has no colors, whatever --log-colors says
    assert "mlxcel listening" not in err


def test_log_disable_logs_nothing(tmp_path):
    out, err = _run_server(tmp_path, "--log-disable")
    assert out.strip() == "" and err.strip() == "", (out, err)


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlxcel", "serve", *args], capture_output=True, text=True,
                          timeout=60)


def test_list_devices_and_cache_list_print_and_exit():
    devices = _serve("--list-devices", "-m", "/no/such/model.gguf")
    assert devices.returncode == 0 and devices.stdout.splitlines()[0] == "Available devices:"
    listed = devices.stdout.splitlines()[1:]
    assert listed == ["  (none)"] or (listed and all(": " in line for line in listed))
    cached = _serve("-cl")
    assert cached.returncode == 0
    lines = cached.stdout.splitlines()
    count = int(lines[0].removeprefix("number of models in cache: "))
    assert count == len(lines) - 1 and any(DEFAULT_MODEL in line for line in lines[1:])


@pytest.mark.parametrize("flag, pointer", [("--draft-max", "--spec-draft-n-max"),
                                           ("--draft-n-min", "--spec-draft-n-min"),
                                           ("--spec-ngram-size-n", "--spec-ngram-mod-n-match")])
def test_flags_llama_server_removed_are_refused_with_its_pointer(flag, pointer):
    result = _serve(flag, "4")
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and flag in lines[0] and pointer in lines[0], result.stderr


@pytest.mark.parametrize("args, needle", [(["--log-colors", "purple"], "--log-colors"),
                                          (["--log-file", "/no/such/dir/server.log"], "/no/such/dir/server.log")])
def test_bad_log_flags_fail_in_one_line(args, needle):
    result = _serve(*args)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and needle in lines[0], result.stderr
