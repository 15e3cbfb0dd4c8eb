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

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from fastapi import APIRouter, Request

from mlxcel.http.errors import APIError, invalid_request
from mlxcel.http.json_body import read_raw_body
from mlxcel.http.local_callers import RunningCap, check_page_origin

if TYPE_CHECKING:
    import httpx

router = APIRouter()
PATHS = frozenset({"/cors-proxy"})
URL_MAX = 8192
_RUNNING = RunningCap(32, "proxied requests")


def new_client() -> httpx.AsyncClient:
    """The proxy's client (the app holds it while --ui-mcp-proxy is on)."""
    from mlxcel.http import upstream

    return upstream.new_client()


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


@router.get("/cors-proxy")
@router.post("/cors-proxy")
async def proxy(request: Request):
    client: httpx.AsyncClient | None = request.app.state.proxy_client
    if client is None:
        raise APIError(403, "this feature is disabled", "feature_disabled")
    from mlxcel.http import upstream  # httpx: only where the proxy is served

    check_page_origin(request, "the proxy")
    url = _target(request.query_params.get("url"))
    body = await read_raw_body(request, None) if request.method == "POST" else None
    sent = upstream.outgoing(client, request, url, body)
    _RUNNING.enter()
    answer = None
    try:
        answer = await upstream.forward(request, client, sent, _RUNNING.leave)
        return answer
    finally:
        if not isinstance(answer, upstream.ProxiedResponse):  # its stream's end leaves the count
            _RUNNING.leave()
