"""POST /tools and GET /tools (llama-server's --tools) on a real server: the listing,
calls in the caller's folder, a streamed shell command, a client that leaves killing its
command, the event loop free while a command or a search runs, and every malformed or
cross-site call refused before anything runs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.server_process import ServerProcess, process_alive

JSON = {"Content-Type": "application/json"}


@pytest.fixture(scope="module")
def tooled():
    proc = ServerProcess("-c", "512", "-np", "1", "--tools", "all")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture
def client(tooled):
    with tooled.client() as client:
        yield client


def call(client, tool, params, cwd=None, **extra):
    headers = {**JSON, **({"x-tool-cwd": str(cwd)} if cwd else {}), **extra.pop("headers", {})}
    return client.post("/tools", content=json.dumps({"tool": tool, "params": params, **extra}), headers=headers)


def test_without_tools_both_routes_are_disabled(http):
    for answer in (http.get("/tools"), http.post("/tools", json={"tool": "get_info"})):
        assert answer.status_code == 403 and answer.json()["error"]["type"] == "feature_disabled"


def test_the_listing_names_each_tool_its_permission_and_definition(client):
    listing = client.get("/tools").json()
    assert [t["tool"] for t in listing] == ["read_file", "file_glob_search", "grep_search", "exec_shell_command",
                                            "write_file", "edit_file", "get_info"]
    writes = {t["tool"] for t in listing if t["permissions"]["write"]}
    assert writes == {"exec_shell_command", "write_file", "edit_file"}
    read = listing[0]
    assert read["type"] == "server" and read["display_name"] == "Read file"
    assert read["definition"]["function"]["parameters"]["required"] == ["path"]


def test_calls_run_in_the_callers_folder(client, tmp_path):
    written = call(client, "write_file", {"path": "notes/a.txt", "content": "alpha\nbeta\n"}, tmp_path).json()
    assert written == {"result": "file written successfully", "path": "notes/a.txt", "bytes": 11}
    assert call(client, "read_file", {"path": "notes/a.txt", "append_loc": True}, tmp_path).json() == {
        "plain_text_response": "1\u2192alpha\n2\u2192beta\n"}
    edited = call(client, "edit_file", {"path": "notes/a.txt", "edits": [{"old_text": "beta", "new_text": "gamma"}]},
                  tmp_path).json()
    assert edited["edits_applied"] == 1 and (tmp_path / "notes/a.txt").read_text() == "alpha\ngamma\n"
    found = call(client, "file_glob_search", {"path": ".", "include": "*.txt"}, tmp_path).json()
    assert found["entries"] == [{"path": "notes/a.txt", "type": "file"}] and found["base"] == str(tmp_path)
    grep = call(client, "grep_search", {"path": ".", "pattern": "gam+a", "return_line_numbers": True}, tmp_path)
    assert grep.json()["plain_text_response"].startswith("notes/a.txt:2:gamma\n")
    shell = call(client, "exec_shell_command", {"command": "pwd && exit 4"}, tmp_path).json()
    assert shell == {"plain_text_response": f"{tmp_path}\n\n[exit code: 4]"}
    assert call(client, "get_info", {}, tmp_path).json()["cwd"] == str(tmp_path)
    # a tool's own failure is its answer, for the model to read
    assert call(client, "read_file", {"path": "missing.txt"}, tmp_path).json() == {
        "error": "cannot stat file: missing.txt"}
    raw = call(client, "read_file", {"path": "notes/a.txt"}, tmp_path, headers={"x-resp-type": "base64"}).json()
    assert raw == {"base64": "YWxwaGEKZ2FtbWEK", "size_bytes": 12}


def test_a_shell_command_streams_its_output_then_done(client, tmp_path):
    body = {"tool": "exec_shell_command", "stream": True, "params": {"command": "echo one; sleep 0.3; echo two"}}
    events, arrived = [], []
    with client.stream("POST", "/tools", content=json.dumps(body), headers=JSON) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                arrived.append(time.monotonic())
    assert events == [{"chunk": "one\n"}, {"chunk": "two\n"}, {"chunk": "\n[exit code: 0]"}, {"done": True}]
    assert arrived[1] - arrived[0] > 0.2  # each piece as the command wrote it
    refused = client.post("/tools", content=json.dumps({"tool": "read_file", "stream": True, "params": {"path": "x"}}),
                          headers=JSON)
    assert refused.status_code == 404 and "does not support stream" in refused.json()["error"]["message"]


def test_a_command_holding_a_nul_is_the_tools_error_streamed_or_not(client):
    whole = call(client, "exec_shell_command", {"command": "echo a\u0000b"})
    assert whole.status_code == 200 and whole.json() == {"error": "command must not hold a NUL character"}
    body = {"tool": "exec_shell_command", "stream": True, "params": {"command": "echo a\u0000b"}}
    streamed = client.post("/tools", content=json.dumps(body), headers=JSON)
    assert streamed.status_code == 200 and streamed.text == (
        'data: {"done": true, "error": "command must not hold a NUL character"}\n\n')


def test_a_client_that_leaves_kills_its_command_and_the_loop_stays_free(client, tooled, tmp_path):
    pids = tmp_path / "pids"
    beats: list[float] = []
    stop = threading.Event()

    def heartbeat():
        with tooled.client(timeout=5) as probe:
            while not stop.is_set():
                started = time.monotonic()
                assert probe.get("/health").status_code == 200
                beats.append(time.monotonic() - started)
                time.sleep(0.05)

    watcher = threading.Thread(target=heartbeat)
    watcher.start()
    try:
        command = f"sleep 120 & echo $! > {pids}; echo $$ >> {pids}; echo ready; wait"
        body = {"tool": "exec_shell_command", "stream": True, "params": {"command": command, "timeout": 60}}
        with client.stream("POST", "/tools", content=json.dumps(body), headers=JSON) as answer:
            for line in answer.iter_lines():
                if "ready" in line:
                    break  # and leave
        deadline = time.monotonic() + 10
        for pid in map(int, pids.read_text().split()):
            while process_alive(pid):
                assert time.monotonic() < deadline, f"process {pid} outlived its client"
                time.sleep(0.1)
        # a whole (not streamed) call is cancelled too when its client leaves
        pids.unlink()
        body = {"tool": "exec_shell_command", "params": {"command": command, "timeout": 60}}
        with tooled.client(timeout=2) as impatient, pytest.raises(httpx.ReadTimeout):
            impatient.post("/tools", content=json.dumps(body), headers=JSON)
        deadline = time.monotonic() + 10
        for pid in map(int, pids.read_text().split()):
            while process_alive(pid):
                assert time.monotonic() < deadline, f"process {pid} outlived its client"
                time.sleep(0.1)
        # a search that backtracks runs in a child process; the loop keeps answering meanwhile
        (tmp_path / "a.txt").write_text("a" * 26 + "!\n")
        started = time.monotonic()
        grep = call(client, "grep_search", {"path": str(tmp_path), "pattern": "(a+)+$"}).json()
        assert "Total matches: 0" in grep["plain_text_response"] and time.monotonic() - started > 0.5
    finally:
        stop.set()
        watcher.join()
    assert len(beats) > 5 and max(beats) < 1.0


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's socket table")
def test_a_command_holds_none_of_the_servers_listening_sockets(client, tooled):
    """What a command leaves running (`setsid server &`) must not keep the server's port
    once the server is gone: no listening socket is handed down to it."""
    port = f":{tooled.port:04X}"
    table = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    listening = {f"socket:[{fields[9]}]" for fields in table if fields[1].endswith(port) and fields[3] == "0A"}
    assert listening
    held = call(client, "exec_shell_command", {"command": "ls -l /proc/$$/fd"}).json()["plain_text_response"]
    assert "/dev/null" in held and not any(socket in held for socket in listening)


def test_a_job_left_running_with_its_output_elsewhere_does_not_hold_the_answer(client, tmp_path):
    """`server > log 2>&1 &`: the command ends at once, and the job it started goes on."""
    started = time.monotonic()
    command = "sleep 60 > /dev/null 2>&1 & echo $! > pid; echo started"
    answer = call(client, "exec_shell_command", {"command": command, "timeout": 30}, tmp_path).json()
    job = int((tmp_path / "pid").read_text())
    try:
        assert answer == {"plain_text_response": "started\n\n[exit code: 0]"}
        assert time.monotonic() - started < 10 and process_alive(job)
    finally:
        os.kill(job, signal.SIGKILL)


def test_a_stop_ends_the_commands_and_searches_still_running(tmp_path):
    """A stop cancels what still runs after its grace; the processes go with the server."""
    proc = ServerProcess("-c", "256", "-np", "1", "--tools", "exec_shell_command,grep_search")
    try:
        proc.wait_ready()
        (tmp_path / "a.txt").write_text("a" * 30 + "!\n")  # (a+)+$ backtracks for ever on it
        calls = [{"tool": "exec_shell_command", "params": {"command": "echo up; sleep 120", "timeout": 60}},
                 {"tool": "grep_search", "params": {"path": str(tmp_path / "a.txt"), "pattern": "(a+)+$"}}]

        def send(body):
            with proc.client(timeout=60) as client, contextlib.suppress(httpx.HTTPError):
                client.post("/tools", content=json.dumps(body), headers=JSON)

        senders = [threading.Thread(target=send, args=(body,), daemon=True) for body in calls]
        for sender in senders:
            sender.start()
        children = f"/proc/{proc.process.pid}/task/{proc.process.pid}/children"
        deadline = time.monotonic() + 10
        while len(Path(children).read_text().split()) < 2:
            assert time.monotonic() < deadline, "the calls did not start"
            time.sleep(0.1)
        groups = [int(pid) for pid in Path(children).read_text().split()]  # each leads its own session
        time.sleep(0.5)  # the command has started its sleep
        running = [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()
                   and _group(entry) in groups]
        assert len(running) >= 3  # sh, its sleep, the search worker
    finally:
        proc.stop()
    deadline = time.monotonic() + 5
    while any(map(process_alive, running)):
        assert time.monotonic() < deadline, "a tool call's process outlived the server"
        time.sleep(0.1)


def _group(proc_dir: Path) -> int | None:
    try:
        return int(proc_dir.joinpath("stat").read_text().split(")")[-1].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def test_at_most_sixteen_calls_run_at_once(tooled):
    """A seventeenth call is answered 429 while sixteen run; when they end, calls run again."""
    body = json.dumps({"tool": "exec_shell_command", "stream": True, "params": {"command": "echo up; sleep 30"}})
    with tooled.client() as client:
        streams = [client.stream("POST", "/tools", content=body, headers=JSON) for _ in range(16)]
        readers = []  # kept: a line iterator that is collected closes its stream
        try:
            for stream in streams:
                answer = stream.__enter__()
                readers.append(answer.iter_lines())
                assert answer.status_code == 200 and "up" in next(readers[-1])
            refused = call(client, "get_info", {})
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)
        deadline = time.monotonic() + 10
        while (answer := call(client, "get_info", {})).status_code == 429:
            assert time.monotonic() < deadline, "the closed streams still count as running"
            time.sleep(0.1)
        assert answer.status_code == 200


@pytest.mark.parametrize("body, headers, status, needle", [
    ('{"tool": "rm_rf"}', JSON, 404, 'unknown tool "rm_rf"'),
    ('{"params": {}}', JSON, 400, "'tool'"),
    ('{"tool": "read_file", "params": []}', JSON, 400, "'params'"),
    ('{"tool": "read_file", "params": {"path": 7}}', JSON, 400, "'path' must be a string"),
    ('{"tool": "read_file", "params": {}}', JSON, 400, "missing argument 'path'"),
    ('{"tool": "exec_shell_command", "params": {"command": "id", "timeout": "9"}}', JSON, 400, "'timeout'"),
    ('{"tool": "read_file", "stream": "yes", "params": {"path": "x"}}', JSON, 400, "'stream'"),
    ('{"tool": "read_file", "params": {"path": "\\ud800"}}', JSON, 400, ""),
    ('{"tool": "read_file", "params": {"path": NaN}}', JSON, 400, ""),
    ('{"tool": ', JSON, 400, ""),
    ('[1]', JSON, 400, ""),
    ('{"tool": "get_info", "params": {}}', {**JSON, "x-tool-runtime": "docker-container:abc"}, 400, "x-tool-runtime"),
    ('{"tool": "get_info", "params": {}}', {**JSON, "x-tool-cwd": "/no/such/dir"}, 400, "x-tool-cwd"),
    ('{"tool": "get_info", "params": {}}', {**JSON, "x-resp-type": "hex"}, 400, "x-resp-type"),
    # a page elsewhere cannot call, not even with a body the browser sends without asking
    ('{"tool": "exec_shell_command", "params": {"command": "touch /tmp/mlxcel-pwned"}}',
     {"Content-Type": "text/plain"}, 415, "application/json"),
    ('{"tool": "exec_shell_command", "params": {"command": "touch /tmp/mlxcel-pwned"}}',
     {**JSON, "Origin": "https://evil.example"}, 403, "evil.example"),
    ('{"tool": "exec_shell_command", "params": {"command": "touch /tmp/mlxcel-pwned"}}',
     {**JSON, "Origin": "null"}, 403, "CORS"),
    ('{"tool": "exec_shell_command", "params": {"command": "touch /tmp/mlxcel-pwned"}}',
     {**JSON, "Host": "rebound.example"}, 403, "rebound.example"),
])
def test_malformed_and_cross_site_calls_are_refused_before_anything_runs(client, body, headers, status, needle):
    answer = client.post("/tools", content=body, headers=headers)
    assert answer.status_code == status and needle in answer.json()["error"]["message"]
    assert client.get("/health").status_code == 200


def test_local_pages_may_call_and_the_cors_default_is_localhost(client, tmp_path):
    assert not Path("/tmp/mlxcel-pwned").exists()
    local = call(client, "get_info", {}, headers={"Origin": "http://localhost:5173"})
    assert local.status_code == 200 and local.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert call(client, "get_info", {}, headers={"Origin": "http://127.0.0.1:8080"}).status_code == 200
    preflight = client.options("/tools", headers={"Origin": "https://evil.example",
                                                  "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in preflight.headers
    content = b'{"tool": "write_file", "params": {"path": "x", "content": "' + b"a" * (41 << 20) + b'"}}'
    big = client.post("/tools", content=content, headers={**JSON, "x-tool-cwd": str(tmp_path)})
    assert big.status_code == 413 and not (tmp_path / "x").exists()


def test_an_open_cors_policy_given_explicitly_is_kept():
    proc = ServerProcess("-c", "256", "-np", "1", "--tools", "get_info", "--cors-origins", "*")
    try:
        proc.wait_ready()
        with proc.client() as client:
            assert [t["tool"] for t in client.get("/tools").json()] == ["get_info"]
            assert call(client, "get_info", {}, headers={"Origin": "https://app.example"}).status_code == 200
            assert call(client, "read_file", {"path": "/etc/hostname"}).status_code == 404  # not enabled
    finally:
        proc.stop()


MCP_SERVER = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_server.py"


@pytest.fixture(scope="module")
def mcp():
    servers = {"mcpServers": {
        "demo": {"command": sys.executable, "args": [str(MCP_SERVER)], "env": {"MCP_PAGE": "2"}, "timeout_ms": 1500},
        "ghost": {"command": "/no/such/mcp-server"},
        "nameless": {"args": ["skipped: no command"]},
    }}
    proc = ServerProcess("-c", "256", "-np", "1", "--mcp-servers-json", json.dumps(servers))
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def test_mcp_servers_tools_are_listed_and_called(mcp):
    with mcp.client() as client:
        listing = {t["tool"]: t for t in client.get("/tools").json()}
        assert list(listing) == ["demo_echo", "demo_fail", "demo_slow", "demo_die", "demo_pid",
                                 "demo_hangup"]  # three pages
        assert all(t["type"] == "mcp" for t in listing.values())
        assert [name for name, t in listing.items() if not t["permissions"]["write"]] == ["demo_pid"]  # read-only
        assert listing["demo_echo"]["definition"]["function"]["parameters"]["required"] == ["text"]
        assert call(client, "demo_echo", {"text": "hello"}).json() == {"plain_text_response": "hello\n(echoed)"}
        assert call(client, "demo_fail", {}).json() == {"error": "it broke"}
        assert call(client, "demo_echo", {}).status_code == 400  # its schema's required argument
        assert call(client, "demo_echo", {"text": "x"}, headers={"Origin": "https://evil.example"}).status_code == 403
        assert "MCP server 'ghost'" in mcp.log() and "no command" in mcp.log()


def test_a_hung_or_dead_mcp_server_is_replaced_on_the_next_call(mcp):
    with mcp.client() as client:
        first = call(client, "demo_pid", {}).json()["plain_text_response"]
        assert call(client, "demo_pid", {}).json()["plain_text_response"] == first  # kept between calls
        started = time.monotonic()
        assert call(client, "demo_slow", {}).json() == {"error": "request timed out"}
        assert time.monotonic() - started < 5
        assert not process_alive(int(first))  # the hung server was killed
        second = call(client, "demo_pid", {}).json()["plain_text_response"]
        assert second != first
        assert call(client, "demo_die", {}).json() == {"error": "transport closed"}
        third = call(client, "demo_pid", {}).json()["plain_text_response"]
        assert third not in (first, second)
        # a server whose output ended is done with, though it has not exited (or not been reaped yet)
        assert call(client, "demo_hangup", {}).json() == {"error": "transport closed"}
        assert call(client, "demo_pid", {}).json()["plain_text_response"] not in (first, second, third)
        assert not process_alive(int(third))
