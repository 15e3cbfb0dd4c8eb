"""A request's head (request line and headers) is bounded before the app sees it: one
endless header, a flood of small ones, or a URL of megabytes is a 431 in the spec's error
format and a closed connection, not memory held for as long as the client keeps sending;
a head under the bound, and a large body behind a small head, are served."""

from __future__ import annotations

import json
import socket
import time

from mlxcel.http.connection_guard import MAX_HEAD_BYTES


def _connect(server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.settimeout(30)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection."""
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def _status_and_body(raw: bytes) -> tuple[int, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _assert_431(raw: bytes) -> None:
    status, body = _status_and_body(raw)
    assert status == 431, raw[:200]
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and "KiB" in error["message"]


def _overflow(server, opening: bytes, piece: bytes) -> bytes:
    """Send `opening`, then `piece` after `piece` (each its own read on the server) until
    the head passes the bound, then stop, as a client that waits for an answer does; the
    answer, up to the server's close."""
    with _connect(server) as sock:
        sock.sendall(opening)
        sent = len(opening)
        while sent <= MAX_HEAD_BYTES:
            sock.sendall(piece)
            sent += len(piece)
            time.sleep(0.0005)
        return _read_all(sock)


def test_one_long_header_is_a_431(server, http):
    _assert_431(_overflow(server, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Filler: ", b"a" * 4096))
    assert http.get("/health").status_code == 200


def test_many_small_headers_are_a_431(server, http):
    _assert_431(_overflow(server, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n", b"X-Header: " + b"v" * 500 + b"\r\n"))
    assert http.get("/health").status_code == 200


def test_a_url_past_the_bound_is_a_431(server):
    _assert_431(_overflow(server, b"GET /health?", b"q" * 8192))


def test_a_client_that_never_stops_sending_its_head_is_cut_off(server, http):
    """It gets no answer it could read (it never stops to read one), but the server
    closes the connection instead of holding what it sends."""
    with _connect(server) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Filler: ")
        sent, limit = 0, 1024 * MAX_HEAD_BYTES  # 64 MiB: far past what any socket buffers hold
        try:
            while sent < limit:
                sock.sendall(b"a" * 65536)
                sent += 65536
        except (BrokenPipeError, ConnectionResetError):
            pass
    assert sent < limit
    assert http.get("/health").status_code == 200


def test_a_head_under_the_bound_and_a_large_body_are_served(server, http):
    cookie = "c" * (MAX_HEAD_BYTES - 4096)
    assert http.get("/health", headers={"Cookie": cookie}).status_code == 200
    text = "word " * 150_000  # 750 KB of body behind a small head, read in many pieces
    response = http.post("/tokenize", json={"content": text})
    assert response.status_code == 200 and len(response.json()["tokens"]) >= 150_000
    with _connect(server) as sock:  # keep-alive: the bound starts again with each request
        request = (b"GET /health HTTP/1.1\r\nHost: x\r\nCookie: " + cookie.encode() + b"\r\n\r\n")
        for _ in range(3):
            sock.sendall(request)
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(65536)
            assert head.startswith(b"HTTP/1.1 200"), head[:100]
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            body = head.partition(b"\r\n\r\n")[2]
            while len(body) < length:
                body += sock.recv(65536)


def _responses(sock: socket.socket, count: int) -> list[int]:
    """The statuses of the next `count` responses on a kept-alive connection."""
    statuses, buffer = [], b""
    while len(statuses) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {statuses}"
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        statuses.append(int(head.split(b" ", 2)[1]))
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(buffer) < length:
            buffer += sock.recv(65536)
        buffer = buffer[length:]
    return statuses


def test_a_pipelined_request_behind_a_large_body_is_served(server):
    """A client may send its next request before the first is answered (HTTP/1.1
    pipelining): the bytes of the first one's body that arrive in the same read as the
    second's head are not the second's head."""
    body = json.dumps({"content": "word " * 16_000}).encode()  # 80 KB: more than a head may be
    first = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    second = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    with _connect(server) as sock:
        # the first request and the start of the second's head in one write, the rest later
        sock.sendall(first + second[:20])
        time.sleep(0.3)
        sock.sendall(second[20:] + second)
        assert _responses(sock, 3) == [200, 200, 200]


def test_an_endless_header_pipelined_behind_a_request_is_still_a_431(server, http):
    with _connect(server) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nX-Filler: "
                     + b"a" * 4096)  # the second head begins in the read that ends the first request
        sent = 0
        while sent <= MAX_HEAD_BYTES:
            sock.sendall(b"a" * 4096)
            sent += 4096
            time.sleep(0.0005)
        raw = _read_all(sock)
    first, _, rest = raw.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200"), raw[:200]
    _assert_431(rest[rest.index(b"HTTP/1.1 "):])
    assert http.get("/health").status_code == 200


def test_a_request_the_parser_refuses_is_a_400_in_the_error_format(server, http):
    for head in (b"Content-Length: 2\r\nContent-Length: 3\r\n", b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
                 b"Content-Length: -1\r\n"):
        with _connect(server) as sock:
            sock.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n{}")
            status, body = _status_and_body(_read_all(sock))
        assert status == 400 and json.loads(body)["error"]["type"] == "invalid_request_error", body
    assert http.get("/health").status_code == 200
