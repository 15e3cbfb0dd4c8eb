"""HEAD on an API route answers as GET does, without the body, as llama-server's HTTP
library answers it (FastAPI's GET routes alone would answer 405). The server (uvicorn)
sends no body for a request that came as HEAD, whatever the route writes."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class HeadAsGetMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "HEAD":
            scope = {**scope, "method": "GET"}
        await self.app(scope, receive, send)
