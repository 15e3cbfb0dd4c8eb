"""--api-prefix: every route is served under the prefix, as llama-server serves them;
a path outside it is a 404 with llama-server's "File Not Found" body."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

NOT_FOUND = json.dumps({"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}).encode()


class ApiPrefixMiddleware:
    def __init__(self, app: ASGIApp, prefix: str) -> None:
        self.app = app
        self.prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path != self.prefix and not path.startswith(self.prefix + "/"):
            await send({"type": "http.response.start", "status": 404, "headers": [
                (b"content-type", b"application/json; charset=utf-8"),
                (b"content-length", str(len(NOT_FOUND)).encode()),
            ]})
            await send({"type": "http.response.body", "body": NOT_FOUND})
            return
        inner = path[len(self.prefix):] or "/"
        raw = scope.get("raw_path")
        if raw is not None:
            raw = raw[len(self.prefix.encode()):] or b"/"
        await self.app({**scope, "path": inner, "raw_path": raw}, receive, send)
