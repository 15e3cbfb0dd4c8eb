"""GET and POST /cors-proxy (llama-server's --ui-mcp-proxy, turned on by --agent) on a real
server, against a real HTTP server in this process: the named headers and the body go on,
the answer comes back streamed with its status and headers less the other server's cookies
and CORS headers, a client that leaves ends the request to the other server, at most 32
run at once, and every malformed or cross-site request is refused before anything is sent."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.server_process import ServerProcess


class Upstream(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a client that left mid-answer (the tests make them leave): not a failure here

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[dict] = []
        self.gate = threading.Event()  # /events' second event, /hold's answer wait for it
        self.closed = threading.Event()  # /drip's client went away
        self.holding = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Upstream

    def log_message(self, *args) -> None:
        pass

    def _record(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append({"method": self.command, "path": self.path,
                                 "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body.decode()})
        return body

    def do_POST(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        self._record()
        path = self.path.split("?")[0]
        if path == "/echo":
            body = json.dumps(self.server.seen[-1]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Upstream", "yes")
            self.send_header("Set-Cookie", "session=stolen; Path=/")
            self.send_header("Access-Control-Allow-Origin", "*")
            self.end_headers()
            self.wfile.write(body)
        elif path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/echo?from=redirect")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path == "/teapot":
            self.send_response(418)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"short")
        elif path == "/events":  # the second event only once the client has the first
            self._stream_start("text/event-stream")
            self._chunk(b"data: one\n\n")
            self.server.gate.wait(10)
            self._chunk(b"data: two\n\n")
            self._chunk(b"")
        elif path == "/drip":  # until the client goes away
            self._stream_start("text/plain")
            try:
                for _ in range(600):
                    self._chunk(b"drop\n")
                    time.sleep(0.05)
            except OSError:
                self.server.closed.set()
        elif path == "/hold":
            self.server.holding += 1
            self.server.gate.wait(30)
            self._stream_start("text/plain")
            self._chunk(b"held")
            self._chunk(b"")

    def _stream_start(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


@pytest.fixture(scope="module")
def upstream():
    server = Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.gate.set()
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def agent():
    proc = ServerProcess("-c", "256", "-np", "1", "--agent")
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture
def client(agent, upstream):
    upstream.gate.clear()
    with agent.client() as client:
        yield client


def test_without_the_flag_the_proxy_is_disabled(http):
    for answer in (http.get("/cors-proxy", params={"url": "http://127.0.0.1:9/"}),
                   http.post("/cors-proxy", params={"url": "http://127.0.0.1:9/"}, json={})):
        assert answer.status_code == 403 and answer.json()["error"]["type"] == "feature_disabled"
    assert http.get("/props").json()["cors_proxy_enabled"] is False


def test_agent_serves_every_tool_and_the_proxy_for_local_pages_only(client, agent):
    assert client.get("/props").json()["cors_proxy_enabled"] is True
    warning = "security: server tools (POST /tools), the MCP proxy (/cors-proxy) on: callers act on this machine"
    assert agent.log().count(warning) == 1  # as llama-server warns, once
    assert len(client.get("/tools").json()) == 7
    preflight = client.options("/cors-proxy", headers={"Origin": "https://evil.example",
                                                       "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in preflight.headers


def test_the_named_headers_and_the_body_go_on_and_the_answer_comes_back(client, upstream):
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    answer = client.post("/cors-proxy", params={"url": f"{upstream.url}/echo?q=1&r=two"}, content=body, headers={
        "Content-Type": "application/json", "Cookie": "mine=secret", "X-Other": "not sent",
        "Origin": "http://localhost:5173",
        "x-llama-server-proxy-header-authorization": "Bearer remote-token",
        "x-llama-server-proxy-header-accept": "application/json, text/event-stream",
        "x-llama-server-proxy-header-mcp-session-id": "s-1"})
    assert answer.status_code == 200, answer.text
    seen = answer.json()
    assert seen["method"] == "POST" and seen["path"] == "/echo?q=1&r=two" and seen["body"] == body.decode()
    headers = seen["headers"]
    assert headers["authorization"] == "Bearer remote-token" and headers["mcp-session-id"] == "s-1"
    assert headers["accept"] == "application/json, text/event-stream" and headers["content-type"] == "application/json"
    assert headers["host"] == upstream.url.removeprefix("http://")
    assert not {"cookie", "x-other", "origin"} & set(headers) and not any("proxy-header" in k for k in headers)
    # the other server's own headers come back, less its cookies; CORS is this server's
    assert answer.headers["x-upstream"] == "yes" and "set-cookie" not in answer.headers
    assert len(answer.headers.get_list("date")) == 1 and len(answer.headers.get_list("server")) == 1  # ours
    assert answer.headers["access-control-allow-origin"] == "http://localhost:5173"
    got = client.get("/cors-proxy", params={"url": f"{upstream.url}/redirect"})
    assert got.status_code == 200 and got.json()["path"] == "/echo?from=redirect"  # followed
    teapot = client.get("/cors-proxy", params={"url": f"{upstream.url}/teapot"})
    assert teapot.status_code == 418 and teapot.text == "short"


def test_a_cookie_the_other_server_sets_goes_with_no_later_request(client, upstream):
    """The proxy keeps no cookie jar: a session the other server gives one caller is not
    handed on with the next caller's requests, nor across a redirect."""
    first = client.get("/cors-proxy", params={"url": f"{upstream.url}/echo"})  # sets session=stolen
    assert first.status_code == 200 and "set-cookie" not in first.headers
    for path in ("/echo", "/redirect"):
        seen = client.get("/cors-proxy", params={"url": f"{upstream.url}{path}"}).json()
        assert "cookie" not in seen["headers"], path


def test_a_stream_comes_through_piece_by_piece(client, upstream):
    with client.stream("GET", "/cors-proxy", params={"url": f"{upstream.url}/events"}) as answer:
        assert answer.headers["content-type"] == "text/event-stream"
        pieces = answer.iter_bytes()
        assert next(pieces) == b"data: one\n\n"  # before the other server has sent the second
        upstream.gate.set()
        assert b"".join(pieces) == b"data: two\n\n"


def test_a_client_that_leaves_ends_the_request_to_the_other_server(client, agent, upstream):
    upstream.closed.clear()
    with client.stream("GET", "/cors-proxy", params={"url": f"{upstream.url}/drip"}) as answer:
        assert next(answer.iter_bytes()).startswith(b"drop")
    assert upstream.closed.wait(10), "the proxied request outlived its client"
    assert client.get("/health").status_code == 200


def test_at_most_32_run_at_once_and_the_loop_stays_free(agent, upstream):
    upstream.gate.clear()
    upstream.holding = 0
    results: list[int] = []

    def hold() -> None:
        with agent.client(timeout=30) as c:
            results.append(c.get("/cors-proxy", params={"url": f"{upstream.url}/hold"}).status_code)

    threads = [threading.Thread(target=hold) for _ in range(32)]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 15
        while upstream.holding < 32:
            assert time.monotonic() < deadline, f"only {upstream.holding} requests reached the other server"
            time.sleep(0.05)
        with agent.client(timeout=5) as c:
            started = time.monotonic()
            assert c.get("/health").status_code == 200 and time.monotonic() - started < 1.0
            refused = c.get("/cors-proxy", params={"url": f"{upstream.url}/echo"})
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    finally:
        upstream.gate.set()
        for thread in threads:
            thread.join()
    assert results == [200] * 32
    with agent.client() as c:
        assert c.get("/cors-proxy", params={"url": f"{upstream.url}/echo"}).status_code == 200


def test_clients_that_leave_before_the_answer_free_their_places(agent, upstream):
    """32 clients give up while the other server has not answered: their requests are
    cancelled and leave the count, so the next request goes through."""
    upstream.gate.clear()

    def give_up() -> None:
        with agent.client(timeout=1.5) as c, pytest.raises(httpx.ReadTimeout):
            c.get("/cors-proxy", params={"url": f"{upstream.url}/hold"})

    threads = [threading.Thread(target=give_up) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with agent.client() as c:
        deadline = time.monotonic() + 5
        while (status := c.get("/cors-proxy", params={"url": f"{upstream.url}/echo"}).status_code) == 429:
            assert time.monotonic() < deadline, "requests whose clients left still count"
            time.sleep(0.1)
        assert status == 200
    upstream.gate.set()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("url,headers,status,needle", [
    (None, {}, 400, "missing"),
    ("ftp://127.0.0.1/x", {}, 400, "scheme"),
    ("file:///etc/passwd", {}, 400, "scheme"),
    ("http://", {}, 400, "no host"),
    ("http://user:pw@127.0.0.1/", {}, 400, "credentials"),
    ("http://127.0.0.1:99999/", {}, 400, "url"),
    ("http://127.0.0.1/a b", {}, 400, "spaces"),
    ("http://127.0.0.1/\x7f", {}, 400, "control"),
    ("http://127.0.0.1/" + "a" * 9000, {}, 400, "longer"),
    ("http://xn--a.example/", {}, 400, "cannot be sent"),  # not a valid IDNA host
    ("http://\x00x/", {}, 400, "control"),
    # a page elsewhere cannot send through it: by its Origin, or by what the browser says of an image or a link
    ("UPSTREAM/echo", {"Origin": "https://evil.example"}, 403, "evil.example"),
    ("UPSTREAM/echo", {"Origin": "null"}, 403, "CORS"),
    ("UPSTREAM/echo", {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}, 403, "another site"),
    ("UPSTREAM/echo", {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "navigate"}, 403, "another site"),
    ("UPSTREAM/echo", {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "no-cors"}, 403, "another site"),
    # DNS rebinding: a page whose site name now points here is same-origin, and sends neither
    ("UPSTREAM/echo", {"Host": "rebound.example:8080"}, 403, "rebound.example"),
    ("UPSTREAM/echo", {"Host": "localhost.evil.example"}, 403, "localhost.evil.example"),
])
def test_malformed_and_cross_site_requests_are_refused_before_anything_is_sent(client, upstream, url, headers,
                                                                               status, needle):
    before = len(upstream.seen)
    params = {} if url is None else {"url": url.replace("UPSTREAM", upstream.url)}
    answer = client.get("/cors-proxy", params=params, headers=headers)
    assert answer.status_code == status and needle in answer.json()["error"]["message"], answer.text
    assert len(upstream.seen) == before and client.get("/health").status_code == 200


def test_a_server_that_is_not_there_is_a_502_and_a_huge_body_a_413(client, upstream):
    gone = client.get("/cors-proxy", params={"url": f"http://127.0.0.1:{_closed_port()}/"})
    assert gone.status_code == 502 and gone.json()["error"]["type"] == "server_error"
    before = len(upstream.seen)
    big = client.post("/cors-proxy", params={"url": f"{upstream.url}/echo"}, content=b"x" * (33 << 20))
    assert big.status_code == 413 and len(upstream.seen) == before
    # a header value that is not ASCII cannot be sent on
    bad = client.get("/cors-proxy", params={"url": f"{upstream.url}/echo"},
                     headers={"x-llama-server-proxy-header-x-bad": "caf\u00e9".encode()})
    assert bad.status_code == 400 and "cannot be sent" in bad.json()["error"]["message"], bad.text
    assert len(upstream.seen) == before and client.get("/health").status_code == 200


def test_local_names_reach_the_proxy(client, upstream):
    for host in ("localhost:1", "app.localhost", "127.0.0.1", "[::1]:8080"):
        answer = client.get("/cors-proxy", params={"url": f"{upstream.url}/echo"}, headers={"Host": host})
        assert answer.status_code == 200, (host, answer.text)
