"""CORS as llama-server answers it (--cors-origins, --cors-methods, --cors-headers,
--cors-credentials): every response carries `Access-Control-Allow-Origin`; every
OPTIONS request, on any path and before the API-key check, gets an empty 200 with the
allowed credentials, methods and headers. Header names go out in llama-server's casing.

Origins: `*` with credentials (the default) echoes the request's Origin; `*` without
credentials answers `*`; `localhost` echoes only a localhost Origin; a list echoes the
request's Origin when the list names it (llama-server sends the configured list
verbatim, which a browser accepts only when it holds one origin)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlxcel.http.header_case import cased

ALLOW_ORIGIN = cased("Access-Control-Allow-Origin")
ALLOW_CREDENTIALS = cased("Access-Control-Allow-Credentials")
ALLOW_METHODS = cased("Access-Control-Allow-Methods")
ALLOW_HEADERS = cased("Access-Control-Allow-Headers")
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True)
class CorsPolicy:
    origins: str = "*"
    methods: str = "GET, POST, DELETE, OPTIONS"
    headers: str = "*"
    credentials: bool = True

    def allowed_origin(self, origin: str | None) -> str | None:
        """The Access-Control-Allow-Origin value for a request from `origin`, or None."""
        if self.origins == "*":
            return origin if self.credentials else "*"
        if not origin:
            return None
        if self.origins == "localhost":
            return origin if _is_localhost(origin) else None
        listed = {o.strip() for o in self.origins.split(",") if o.strip()}
        return origin if origin in listed else None


def _is_localhost(origin: str) -> bool:
    try:
        return urlsplit(origin).hostname in LOCAL_HOSTS
    except ValueError:
        return False


def _origin(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"origin":
            return value.decode("latin-1")
    return None


class CorsMiddleware:
    def __init__(self, app: ASGIApp, policy: CorsPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        allowed = self.policy.allowed_origin(_origin(scope))
        origin_header = [(ALLOW_ORIGIN, allowed.encode("latin-1"))] if allowed else []
        if scope["method"] == "OPTIONS":
            await self._preflight(send, origin_header)
            return

        async def send_with_origin(message: Message) -> None:
            if message["type"] == "http.response.start" and origin_header:
                message = {**message, "headers": [*message.get("headers", []), *origin_header]}
            await send(message)

        await self.app(scope, receive, send_with_origin)

    async def _preflight(self, send: Send, origin_header: list[tuple[bytes, bytes]]) -> None:
        policy = self.policy
        headers = [
            *origin_header,
            (ALLOW_CREDENTIALS, b"true" if policy.credentials else b"false"),
            (ALLOW_METHODS, policy.methods.encode("latin-1")),
            (ALLOW_HEADERS, policy.headers.encode("latin-1")),
            (b"content-type", b"text/html"),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
