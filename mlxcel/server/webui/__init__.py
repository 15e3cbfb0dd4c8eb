"""The chat web UI: a page at `/` for browsers (a GET whose Accept asks for HTML; API
clients there still get the health answer the spec gives `/`), and its script and
style under `/webui/`. The page only talks to the server's own API, so it works
behind an API key (it asks for one) and under --api-prefix. The script renders model
output as text or escaped markdown, and the Content-Security-Policy allows no inline
or foreign script, so nothing a model writes can run in the page. `/sw.js`, served with the
page on or off, retires a service worker another UI (llama-server's) left at this address."""

from __future__ import annotations

from importlib.resources import files

from starlette.types import ASGIApp, Receive, Scope, Send

ASSET_PREFIX = "/webui/"
ASSET_PATHS = frozenset({"/index.html", "/webui/app.js", "/webui/math.js", "/webui/mcp.js", "/webui/app.css"})
WORKER_PATH = "/sw.js"  # a service worker that removes itself (sw.js)
_TYPES = {"html": b"text/html; charset=utf-8", "js": b"text/javascript; charset=utf-8",
          "css": b"text/css; charset=utf-8"}
_POLICY = (b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
           b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def _asset(name: str, prefix: str) -> bytes:
    text = files(__package__).joinpath(name).read_text(encoding="utf-8")
    return text.replace("{{PREFIX}}", prefix).encode()


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
        self.assets = {WORKER_PATH: (_asset("sw.js", prefix), _TYPES["js"])}
        if page:
            self.assets.update({
                "/": (_asset("index.html", prefix), _TYPES["html"]),
                "/index.html": (_asset("index.html", prefix), _TYPES["html"]),  # as llama-server serves it
                "/webui/app.js": (_asset("app.js", prefix), _TYPES["js"]),
                "/webui/math.js": (_asset("math.js", prefix), _TYPES["js"]),
                "/webui/mcp.js": (_asset("mcp.js", prefix), _TYPES["js"]),
                "/webui/app.css": (_asset("app.css", prefix), _TYPES["css"]),
            })

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            path = scope["path"]
            found = self.assets.get(path)
            if found is not None and (path != "/" or wants_html(scope)):
                await self._send(scope, send, *found)
                return
        await self.app(scope, receive, send)

    @staticmethod
    async def _send(scope: Scope, send: Send, body: bytes, content_type: bytes) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", content_type),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-cache"),
            (b"x-content-type-options", b"nosniff"),
            (b"content-security-policy", _POLICY),
            (b"referrer-policy", b"no-referrer"),
        ]})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})
