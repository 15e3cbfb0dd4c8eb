"""The other server's side of /cors-proxy (server/routes/cors_proxy.py), on httpx: the
headers that go on and come back, the request, and the streamed answer. Imported only
where the proxy is served, so a server without it does not pay for importing httpx."""

from __future__ import annotations

from collections.abc import Callable
from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mlxcel.http.errors import APIError, invalid_request
from mlxcel.http.request_context import ClientLeft, run_while_connected
from mlxcel.http.sse import WatchedStreamResponse

HEADER_PREFIX = "x-llama-server-proxy-header-"
# headers of one connection, or that the proxy sets itself: never sent on
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te",
                  "trailer", "transfer-encoding", "upgrade", "host", "content-length"})
_NOT_SENT = _HOP | {"accept-encoding"}  # the body goes back as it arrives: identity asked for
# not returned: those, what this server sends itself (Date, Server), and what must not land
# on this server's origin (the other server's cookies, its CORS headers: this server's own
# policy answers for it)
_NOT_RETURNED = frozenset(name.encode() for name in _HOP | {"date", "server", "set-cookie", "set-cookie2"})


def new_client() -> httpx.AsyncClient:
    """The one client every proxied request goes through (closed with the app). Redirects
    are followed, as llama-server's proxy does; no proxy or credentials from the
    environment; ten minutes for the other server to answer and go on answering. It keeps
    no cookies: a cookie the other server sets in one caller's answer (its session) would
    otherwise go with every later caller's request to it."""
    return httpx.AsyncClient(follow_redirects=True, max_redirects=5, trust_env=False,
                             timeout=httpx.Timeout(600.0, connect=30.0, pool=30.0),
                             cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=())))


def outgoing(client: httpx.AsyncClient, request: Request, url: str, body: bytes | None) -> httpx.Request:
    """The request to send on: the headers the caller named x-llama-server-proxy-header-NAME,
    and a POST's body with its Content-Type (a 400 when httpx cannot send it)."""
    headers = {"accept-encoding": "identity"}
    for key, value in request.headers.items():
        if key.startswith(HEADER_PREFIX):
            name = key[len(HEADER_PREFIX):]
            if name and name not in _NOT_SENT:
                headers[name] = value
    content_type = request.headers.get("content-type")
    if body is not None and content_type and "content-type" not in headers:
        headers["content-type"] = content_type
    try:
        return client.build_request(request.method, url, headers=headers, content=body)
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, UnicodeError) as exc:
        raise invalid_request(f"the request cannot be sent: {exc}") from None


async def forward(request: Request, client: httpx.AsyncClient, sent: httpx.Request,
                  on_close: Callable[[], None]) -> Response:
    """The other server's answer, streamed (`on_close` runs when its stream ends); a 499
    when the client left before its headers came (the request is cancelled then), a 504
    or a 502 when the other server did not answer in time or could not be reached."""
    try:
        answer = await run_while_connected(request, client.send(sent, stream=True))
    except ClientLeft:
        return JSONResponse({"error": "the client left"}, status_code=499)
    except httpx.TimeoutException:
        raise APIError(504, f"{sent.url.host} did not answer in time", "server_error") from None
    except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as exc:
        raise APIError(502, f"the request to {sent.url.host} failed: {exc or type(exc).__name__}",
                       "server_error") from None
    return ProxiedResponse(answer, on_close)


class ProxiedResponse(WatchedStreamResponse):
    broken_by = (httpx.HTTPError,)
    broken_note = "proxied stream broken off"

    def __init__(self, answer: httpx.Response, on_close: Callable[[], None]) -> None:
        super().__init__(_body(answer), b"application/octet-stream", on_close, answer.status_code)
        self.raw_headers = [(k.lower(), v) for k, v in answer.headers.raw
                            if k.lower() not in _NOT_RETURNED and not k.lower().startswith(b"access-control-")]
        if not any(k == b"content-type" for k, _ in self.raw_headers):
            self.raw_headers.append((b"content-type", b"application/octet-stream"))


async def _body(answer: httpx.Response):
    try:
        async for chunk in answer.aiter_raw():
            yield chunk
    finally:
        await answer.aclose()
