"""The chat web UI: a page at `/` for browsers (a GET whose Accept asks for HTML; API
clients there still get the health answer the spec gives `/`), and its script and
style under `/webui/`. The page only talks to the server's own API, so it works
behind an API key (it asks for one) and under --api-prefix. The script renders model
output as text or escaped markdown, and the Content-Security-Policy allows no inline
or foreign script, so nothing a model writes can run in the page. `/sw.js`, served with the
page on or off, retires a service worker another UI (llama-server's) left at this address."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib.resources import files

from starlette.types import ASGIApp, Receive, Scope, Send

ASSET_PREFIX = "/webui/"
ASSET_PATHS = frozenset({"/index.html", "/webui/app.js", "/webui/math.js", "/webui/mcp.js", "/webui/app.css"})
WORKER_PATH = "/sw.js"  # a service worker that removes itself (sw.js)
_TYPES = {"html": b"text/html; charset=utf-8", "js": b"text/javascript; charset=utf-8",
          "css": b"text/css; charset=utf-8"}
_POLICY = (b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
           b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: bytes
    etag: bytes  # the body's hash: a browser revalidates (no-cache) and gets a 304 while it holds this

    def matches(self, if_none_match: bytes) -> bool:
        tags = [tag.strip().removeprefix(b"W/") for tag in if_none_match.split(b",")]
        return self.etag in tags or b"*" in tags


def _asset(name: str, prefix: str) -> Asset:
    """A file of the page, its URLs under --api-prefix, else relative to the page (./webui/app.js,
    ./v1/...): behind a reverse proxy that serves this server under a path of its own, the page
    still finds its files and the API, as llama-server's relative one does."""
    text = files(__package__).joinpath(name).read_text(encoding="utf-8")
    body = text.replace("{{PREFIX}}", prefix or ".").encode()
    etag = b'"' + hashlib.sha256(body).hexdigest()[:24].encode() + b'"'
    return Asset(body, _TYPES[name.rsplit(".", 1)[1]], etag)


def wants_html(scope: Scope) -> bool:
    """A browser's navigation: its Accept names text/html and not JSON (API clients send
    */* or JSON)."""
    for name, value in scope.get("headers") or ():
        if name == b"accept":
            value = value.lower()
            return b"text/html" in value and b"application/json" not in value
    return False


class WebUIMiddleware:
    """The page and its files (`page`: not with --no-webui), and /sw.js either way."""

    def __init__(self, app: ASGIApp, prefix: str = "", page: bool = True) -> None:
        self.app = app
        self.assets = {WORKER_PATH: _asset("sw.js", prefix)}
        if page:
            self.assets.update({
                "/": _asset("index.html", prefix),
                "/index.html": _asset("index.html", prefix),  # as llama-server serves it
                "/webui/app.js": _asset("app.js", prefix),
                "/webui/math.js": _asset("math.js", prefix),
                "/webui/mcp.js": _asset("mcp.js", prefix),
                "/webui/app.css": _asset("app.css", prefix),
            })

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            path = scope["path"]
            found = self.assets.get(path)
            if found is not None and (path != "/" or wants_html(scope)):
                await self._send(scope, send, found, vary=path == "/")
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _send(scope: Scope, send: Send, asset: Asset, vary: bool) -> None:
        cached = asset.matches(_header(scope, b"if-none-match"))
        headers = [
            (b"etag", asset.etag),
            (b"cache-control", b"no-cache"),
            (b"x-content-type-options", b"nosniff"),
            (b"content-security-policy", _POLICY),
            (b"referrer-policy", b"no-referrer"),
        ]
        if vary:  # / is the page for browsers and the health answer for API clients
            headers.append((b"vary", b"Accept"))
        if not cached:
            headers += [(b"content-type", asset.content_type), (b"content-length", str(len(asset.body)).encode())]
        await send({"type": "http.response.start", "status": 304 if cached else 200, "headers": headers})
        body = b"" if cached or scope["method"] == "HEAD" else asset.body
        await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, wanted: bytes) -> bytes:
    return b",".join(value for name, value in scope.get("headers") or () if name == wanted)
