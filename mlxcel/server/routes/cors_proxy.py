"""llama-server's MCP CORS proxy (`--ui-mcp-proxy`, or `--agent`): GET and POST
/cors-proxy?url=URL send the request on to URL and stream its answer back, so a web page
can talk to a server (a remote MCP server) that does not allow it by CORS. The page names
the headers to send as `x-llama-server-proxy-header-NAME: value`; the body of a POST goes
as it is, with its Content-Type. Without the flag both routes answer llama-server's 403
"this feature is disabled".

Any page this server's CORS policy allows can reach through it whatever this machine
reaches, so a page it does not allow is refused before anything is sent (its Origin, or
the browser's Sec-Fetch headers on an image or a link), and --cors-origins defaults to
localhost with the proxy. The answer's status, headers and body are the other server's,
less what belongs to one connection (hop-by-hop headers, Content-Length) and what must not
land on this server's origin (its cookies, its own CORS headers). A client that leaves
ends the request to the other server."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from mlxcel.http.errors import APIError, invalid_request
from mlxcel.http.json_body import read_raw_body
from mlxcel.http.local_callers import RunningCap, check_page_origin
from mlxcel.http.request_context import ClientLeft, run_while_connected
from mlxcel.http.sse import WatchedStreamResponse

router = APIRouter()
PATHS = frozenset({"/cors-proxy"})
HEADER_PREFIX = "x-llama-server-proxy-header-"
URL_MAX = 8192
_RUNNING = RunningCap(32, "proxied requests")
# headers of one connection, or that this proxy sets itself
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te",
                  "trailer", "transfer-encoding", "upgrade", "host", "content-length"})
# not returned: those, what this server sends itself (Date, Server), and what must not land
# on this server's origin (the other server's cookies, its CORS headers: this server's own
# policy answers for it)
_NOT_RETURNED = frozenset(name.encode() for name in _HOP | {"date", "server", "set-cookie", "set-cookie2"})


def new_client() -> httpx.AsyncClient:
    """The one client every proxied request goes through (closed with the app). Redirects
    are followed, as llama-server's proxy does; no proxy or credentials from the
    environment; ten minutes for the other server to answer and go on answering."""
    return httpx.AsyncClient(follow_redirects=True, max_redirects=5, trust_env=False,
                             timeout=httpx.Timeout(600.0, connect=30.0, pool=30.0))


def _target(url: str | None) -> str:
    if not url:
        raise invalid_request("url: the address to send the request to is missing (/cors-proxy?url=URL)")
    if len(url) > URL_MAX:
        raise invalid_request(f"url: longer than {URL_MAX} characters")
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        raise invalid_request("url: spaces and control characters are not allowed")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError as exc:
        raise invalid_request(f"url: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise invalid_request(f"url: the scheme must be http or https, not {parts.scheme[:20]!r}")
    if not parts.hostname:
        raise invalid_request("url: the address has no host")
    if parts.username is not None or parts.password is not None:
        raise invalid_request("url: credentials in the address are not supported (send them as a header)")
    return url


def _outgoing_headers(request: Request) -> dict[str, str]:
    headers = {"accept-encoding": "identity"}  # the body goes back as it arrives
    for key, value in request.headers.items():
        if key.startswith(HEADER_PREFIX):
            name = key[len(HEADER_PREFIX):]
            if name and name not in _HOP and name != "accept-encoding":
                headers[name] = value
    content_type = request.headers.get("content-type")
    if request.method == "POST" and content_type and "content-type" not in headers:
        headers["content-type"] = content_type
    return headers


class _ProxiedResponse(WatchedStreamResponse):
    broken_by = (httpx.HTTPError,)
    broken_note = "proxied stream broken off"

    def __init__(self, upstream: httpx.Response, on_close) -> None:
        super().__init__(_body(upstream), b"application/octet-stream", on_close, upstream.status_code)
        self.raw_headers = [(k.lower(), v) for k, v in upstream.headers.raw
                            if k.lower() not in _NOT_RETURNED and not k.lower().startswith(b"access-control-")]
        if not any(k == b"content-type" for k, _ in self.raw_headers):
            self.raw_headers.append((b"content-type", b"application/octet-stream"))


async def _body(upstream: httpx.Response):
    try:
        async for chunk in upstream.aiter_raw():
            yield chunk
    finally:
        await upstream.aclose()


@router.get("/cors-proxy")
@router.post("/cors-proxy")
async def proxy(request: Request):
    client: httpx.AsyncClient | None = request.app.state.proxy_client
    if client is None:
        raise APIError(403, "this feature is disabled", "feature_disabled")
    check_page_origin(request, "the proxy")
    url = _target(request.query_params.get("url"))
    headers = _outgoing_headers(request)
    body = await read_raw_body(request, None) if request.method == "POST" else None
    try:
        outgoing = client.build_request(request.method, url, headers=headers, content=body)
    except (httpx.HTTPError, httpx.InvalidURL, ValueError, UnicodeError) as exc:
        raise invalid_request(f"the request cannot be sent: {exc}") from None
    _RUNNING.enter()
    streaming = False  # from then on the response's end leaves the count
    try:
        upstream = await run_while_connected(request, client.send(outgoing, stream=True))
        streaming = True
        return _ProxiedResponse(upstream, _RUNNING.leave)
    except ClientLeft:
        return JSONResponse({"error": "the client left"}, status_code=499)
    except httpx.TimeoutException:
        raise APIError(504, f"{outgoing.url.host} did not answer in time", "server_error") from None
    except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError) as exc:
        raise APIError(502, f"the request to {outgoing.url.host} failed: {exc or type(exc).__name__}",
                       "server_error") from None
    finally:
        if not streaming:
            _RUNNING.leave()
