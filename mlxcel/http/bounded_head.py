"""A bound on a request's head (its request line and headers) before any of it reaches
the app.

uvicorn's httptools protocol keeps the URL and every header of a request in memory until
the blank line that ends them, however long that takes: a client that sends one endless
header holds as much of the server's memory as it sends. llama-server's HTTP library
caps a request line and each header at 8 KiB. Here the whole head may take
MAX_HEAD_BYTES; a request whose head runs past it is answered 431 in the spec's error
format, and the connection is closed."""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024  # request line and headers together (cookies and tokens included)


def _too_large_response() -> bytes:
    body = json.dumps({"error": {
        "message": f"the request line and headers exceed {MAX_HEAD_BYTES // 1024} KiB",
        "type": "invalid_request_error", "code": "request_header_fields_too_large"}}).encode()
    return (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)


TOO_LARGE = _too_large_response()


class BoundedHeadProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, refusing a head longer than MAX_HEAD_BYTES. Bytes
    are counted while a head is being read (from a message's first byte to the end of
    its headers); a read that ends a head is not counted, so a body that arrives with
    its head never is."""

    _in_head = False
    _head_bytes = 0

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if not self._in_head or self.transport.is_closing():
            return
        self._head_bytes += len(data)
        if self._head_bytes > MAX_HEAD_BYTES:
            self._in_head = False
            self.transport.write(TOO_LARGE)
            self.transport.close()
