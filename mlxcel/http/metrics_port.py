"""--metrics-port PORT: Prometheus metrics also on a port of their own (the spec's
"--metrics or --metrics-port"), for a scraper kept apart from the API. On that port
only `GET /metrics` is served (under --api-prefix too, where it is found without the
prefix), with the API's key rule; any other path there is a 404."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from mlxcel.http.api_prefix import NOT_FOUND


class MetricsPortMiddleware:
    def __init__(self, app: ASGIApp, port: int, prefix: str = "") -> None:
        self.app, self.port, self.prefix = app, port, prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        server = scope.get("server") if scope["type"] in ("http", "websocket") else None
        if not server or server[1] != self.port:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD") and scope["path"] == "/metrics":
            path = self.prefix + "/metrics"
            await self.app({**scope, "path": path, "raw_path": path.encode()}, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "http.response.start", "status": 404, "headers": [
            (b"content-type", b"application/json; charset=utf-8"), (b"content-length", str(len(NOT_FOUND)).encode())]})
        await send({"type": "http.response.body", "body": NOT_FOUND})
