"""A client cannot hold the server by stalling (llama-server's --timeout, here 1 s):
a connection that sends nothing is closed, a head that never ends and a body that stops
are 408s in the spec's error format, a response the client does not read is dropped and
the stream's slot freed. Slow clients that make progress are served whole, and a long
generation, during which the client has nothing to send or read, is not cut. Nor
can a burst of connections run the server out of open files at a distribution's
default soft limit."""

from __future__ import annotations

import json
import re
import resource
import socket
import time
from pathlib import Path

import pytest

from mlxcel.server.open_files import MAX_OPEN_FILES
from tests.server_process import ServerProcess

TIMEOUT_S = 1


@pytest.fixture(scope="module")
def guarded():
    """The server, started with a soft open-files limit of 256 (it inherits ours)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, soft), hard))
    try:
        proc = ServerProcess("-c", "4096", "-np", "1", "--timeout", str(TIMEOUT_S))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def _connect(server, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", server.port))
    return sock


def _post_head(path: str, length: int) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def _read_until_closed(sock: socket.socket) -> bytes:
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def _assert_408(raw: bytes) -> None:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), raw[:200]
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "request_timeout"


def test_a_connection_that_sends_nothing_is_closed(guarded):
    with _connect(guarded) as sock:
        started = time.monotonic()
        assert _read_until_closed(sock) == b""
        assert TIMEOUT_S * 0.5 <= time.monotonic() - started < 15


def test_a_head_sent_a_byte_at_a_time_is_a_408_at_its_deadline(guarded, http_guarded):
    """Slowloris: each byte is progress, but a head has a deadline of its own."""
    with _connect(guarded) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        sock.settimeout(0.2)
        raw = b""
        while time.monotonic() - started < 15:
            try:
                sock.sendall(b"X")
                chunk = sock.recv(65536)
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            if not chunk:
                break
            raw += chunk
        assert time.monotonic() - started < 10
    _assert_408(raw)
    assert http_guarded.get("/health").status_code == 200


def test_a_body_that_stops_is_a_408(guarded, http_guarded):
    with _connect(guarded) as sock:
        sock.sendall(_post_head("/tokenize", 100) + b'{"content": ')
        _assert_408(_read_until_closed(sock))
    assert http_guarded.post("/tokenize", json={"content": "hi"}).status_code == 200


def test_a_body_sent_slowly_but_steadily_is_served(guarded):
    """The body's bound is between reads: pieces 0.4 s apart over 2.4 s are fine."""
    body = json.dumps({"content": "steady pieces of a body"}).encode()
    pieces = [body[i * len(body) // 6:(i + 1) * len(body) // 6] for i in range(6)]
    with _connect(guarded) as sock:
        sock.sendall(_post_head("/tokenize", len(body)))
        for piece in pieces:
            time.sleep(0.4 * TIMEOUT_S)
            sock.sendall(piece)
        head = sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200"), head[:200]


def _big_tokenize(digits: int) -> bytes:
    body = json.dumps({"content": "0123456789" * (digits // 10), "with_pieces": True}).encode()
    return _post_head("/tokenize", len(body)) + body


def _split_response(raw: bytes) -> tuple[int, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    return int(re.search(rb"content-length: (\d+)", head, re.I).group(1)), body


def test_a_response_the_client_does_not_read_is_dropped(guarded, http_guarded):
    """~13 MB of token pieces, more than the kernel's socket buffers hold: with the
    client reading nothing, the server drops the connection after --timeout."""
    with _connect(guarded, rcvbuf=4096) as sock:
        sock.sendall(_big_tokenize(600_000))
        time.sleep(3 + 4 * TIMEOUT_S)  # the tokenizing, then the stall
        raw = _read_until_closed(sock)
    length, body = _split_response(raw)
    assert len(body) < length
    assert "read none of its response" in guarded.log()
    assert http_guarded.get("/health").status_code == 200


def test_a_slow_but_steady_reader_gets_the_whole_response(guarded):
    """The same response read 32 KiB at a time with pauses: the server's backlog waits
    well past --timeout, but it shrinks, so the client is served to the last byte."""
    with _connect(guarded, rcvbuf=64 * 1024) as sock:
        sock.sendall(_big_tokenize(600_000))
        raw = b""
        while chunk := sock.recv(32 * 1024):
            raw += chunk
            time.sleep(0.01)
            if b"\r\n\r\n" in raw:
                length, body = _split_response(raw)
                if len(body) >= length:
                    break
    length, body = _split_response(raw)
    assert len(body) == length
    assert len(json.loads(body)["tokens"]) >= 600_000 // 2


def test_a_stream_the_client_stops_reading_frees_its_slot(guarded, http_guarded):
    """A stream of large events (100 probabilities a token) to a client that never reads:
    once the socket buffers are full the server waits --timeout, drops the connection,
    and the generation is cancelled long before its 4,000 tokens."""
    request = {"prompt": "Count on and on:", "n_predict": 4000, "ignore_eos": True, "stream": True,
               "n_probs": 100, "cache_prompt": False}
    body = json.dumps(request).encode()
    with _connect(guarded, rcvbuf=4096) as sock:
        sock.sendall(_post_head("/completion", len(body)) + body)
        most, started = 0, time.monotonic()
        while time.monotonic() - started < 180:
            (slot,) = http_guarded.get("/slots").json()
            if slot["is_processing"]:
                most = max(most, slot["n_decoded"])
            elif most:
                break
            time.sleep(0.25)
        assert not slot["is_processing"]
    assert 0 < most < 3000
    assert "read none of its response" in guarded.log()
    answer = http_guarded.post("/completion", json={"prompt": "Hi", "n_predict": 4}).json()
    assert answer["tokens_predicted"] == 4


def test_a_long_generation_is_not_a_stall(guarded, http_guarded):
    """While the server generates a whole answer the client has nothing to send or
    read, for longer than --timeout: that is not a stall."""
    started = time.monotonic()
    answer = http_guarded.post("/completion", json={"prompt": "Once upon a time", "n_predict": 300,
                                                    "ignore_eos": True, "cache_prompt": False}).json()
    assert answer["tokens_predicted"] == 300
    assert time.monotonic() - started > TIMEOUT_S


@pytest.fixture
def http_guarded(guarded):
    with guarded.client() as client:
        yield client


def _soft_open_files(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no open-files line")


def test_the_server_raises_its_open_files_limit(guarded):
    """Started with a soft limit of 256 (as distributions start processes at 1,024), the
    server takes the hard limit, so a burst of clients is not refused by it."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    expected = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, MAX_OPEN_FILES)
    assert expected > 256
    assert _soft_open_files(guarded.process.pid) == expected
