"""Bounds on what a client may hold of the server before its request reaches the app,
and while its response waits for it.

uvicorn's httptools protocol keeps a request's URL and headers in memory until the
blank line that ends them, however long that takes, and waits as long as a client likes
for the rest of a head or body, or for the client to read its response. So one endless
header would hold as much memory as the client sends, a connection that opens and sends
nothing (or a byte now and then) would be held forever, and a client that stops reading a
stream would keep its request, and the slot generating for it, for as long as it stays
connected. Here:

- a head (request line and headers) may take MAX_HEAD_BYTES; past that the request is
  answered 431 and the connection closed (llama-server caps each header at 8 KiB);
- a head must arrive whole within `head_timeout_s` of the connection opening or of its
  first byte (408, or a plain close where nothing was sent);
- a body may pause at most `timeout_s` between reads while the server waits for it (408);
- a request the HTTP parser refuses is uvicorn's 400, in the error format below;
- a response may wait at most `timeout_s` for the client to read any of it; then the
  connection is dropped, and the app sees the client gone (its request is cancelled and
  the slot freed), as for a client that disconnects.

`timeout_s` is llama-server's `--timeout` (its sockets' read and write timeout, 3600 s by
default); the head's deadline is the same, at most HEAD_TIMEOUT_CAP_S, as nginx bounds a
head by default. An error answer is in the spec's error format.
"""

from __future__ import annotations

import asyncio
import json
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from mlxcel.http.errors import invalid_request

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024  # request line and headers together (cookies and tokens included)
DEFAULT_TIMEOUT_S = 3600.0  # llama-server's --timeout default
HEAD_TIMEOUT_CAP_S = 60.0  # a whole head, however long --timeout is (nginx's client_header_timeout)


def _error_response(status: str, code: str, message: str) -> bytes:
    body = json.dumps(invalid_request(message, code).body()).encode()
    return (b"HTTP/1.1 " + status.encode() + b"\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)


TOO_LARGE = _error_response("431 Request Header Fields Too Large", "request_header_fields_too_large",
                            f"the request line and headers exceed {MAX_HEAD_BYTES // 1024} KiB")


def _timed_out(what: str, seconds: float) -> bytes:
    return _error_response("408 Request Timeout", "request_timeout",
                           f"the {what} did not arrive within {seconds:g} s")


class GuardedConnection(HttpToolsProtocol):
    """uvicorn's httptools protocol with the bounds above. Head bytes are counted while a
    head is being read (from a message's first byte to the end of its headers); a read
    that ends a head is not counted, so a body that arrives with its head never is. A
    head that begins in the read that ended the message before it (a pipelined request)
    counts only its parsed URL and headers from that read: the rest of the read was the
    earlier message's (at most one read's worth of a partial header goes uncounted)."""

    timeout_s = DEFAULT_TIMEOUT_S
    head_timeout_s = min(DEFAULT_TIMEOUT_S, HEAD_TIMEOUT_CAP_S)

    _in_head = False
    _head_bytes = 0
    _head_items = 0  # bytes of the URL and headers parsed so far in this head
    _completed_in_read = False  # a message ended in the read being parsed
    _pipelined = False  # this head began in the read that ended the message before it
    _in_body = False
    _last_read = 0.0
    _unsent = 0
    _head_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _write_timer: asyncio.TimerHandle | None = None

    # the head: its size and its deadline

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_expired)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes, self._head_items = True, 0, 0
        self._pipelined = self._completed_in_read
        if self._head_timer is None:  # a later request on a kept-alive connection
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_expired)

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._head_items += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        self._head_items += len(name) + len(value) + 4  # ": " and CRLF

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_timer = _cancel(self._head_timer)
        self._in_body, self._last_read = True, self.loop.time()
        self._body_timer = self.loop.call_later(self.timeout_s, self._body_expired)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_body = False
        self._completed_in_read = True
        self._body_timer = _cancel(self._body_timer)
        super().on_message_complete()

    def data_received(self, data: bytes) -> None:
        self._completed_in_read = False
        super().data_received(data)
        if self.transport.is_closing():
            return
        if self._in_body:
            self._last_read = self.loop.time()
        if self._in_head:
            if self._pipelined:  # the read began with the message before this one
                self._head_bytes, self._pipelined = self._head_items, False
            else:
                self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(TOO_LARGE)

    def _head_expired(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._in_head:
            self._refuse(_timed_out("request's headers", self.head_timeout_s))
        else:  # nothing sent since the connection opened
            self.transport.close()

    # the body: progress at least every timeout_s while the server reads it

    def _body_expired(self) -> None:
        self._body_timer = None
        if not self._in_body or self.transport.is_closing():
            return
        now = self.loop.time()
        waited = now - self._last_read
        if self.flow.read_paused:  # the app has not taken what came: not the client's delay
            self._last_read, waited = now, 0.0
        if waited < self.timeout_s:
            self._body_timer = self.loop.call_later(self.timeout_s - waited, self._body_expired)
            return
        if self.cycle is not None and self.cycle.response_started:
            self.transport.abort()
        else:
            self._refuse(_timed_out("request body", self.timeout_s))

    # the response: the client reads some of it at least every timeout_s

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._unsent = self.transport.get_write_buffer_size()
            self._write_timer = self.loop.call_later(self.timeout_s, self._write_expired)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._write_timer = _cancel(self._write_timer)

    def _write_expired(self) -> None:
        """While writing is paused the app adds nothing (uvicorn's send waits for the
        drain), so a smaller backlog means the client read some: it may go on reading."""
        unsent = self.transport.get_write_buffer_size()
        if unsent < self._unsent:
            self._unsent = unsent
            self._write_timer = self.loop.call_later(self.timeout_s, self._write_expired)
            return
        self._write_timer = None
        log.info("dropped a connection whose client read none of its response for %g s", self.timeout_s)
        self.transport.abort()  # connection_lost follows: the app sees the client gone

    def connection_lost(self, exc: Exception | None) -> None:
        self._in_head = self._in_body = False
        self._head_timer = _cancel(self._head_timer)
        self._body_timer = _cancel(self._body_timer)
        self._write_timer = _cancel(self._write_timer)
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """A request the HTTP parser refuses (a duplicated Content-Length, Content-Length
        beside chunked, a bad chunk size): uvicorn's 400, in the spec's error format."""
        self._refuse(_error_response("400 Bad Request", "invalid_http_request", msg))

    def _refuse(self, response: bytes) -> None:
        self._in_head = self._in_body = False
        self.transport.write(response)
        self.transport.close()


def _cancel(timer: asyncio.TimerHandle | None) -> None:
    if timer is not None:
        timer.cancel()


def guarded_protocol(timeout_s: float = DEFAULT_TIMEOUT_S) -> type[GuardedConnection]:
    """The protocol class for uvicorn's `http=`, with `timeout_s` as the read and write
    timeout (llama-server's --timeout)."""
    return type("GuardedConnection", (GuardedConnection,),
                {"timeout_s": float(timeout_s), "head_timeout_s": min(float(timeout_s), HEAD_TIMEOUT_CAP_S)})
