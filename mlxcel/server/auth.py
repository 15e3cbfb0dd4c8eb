"""API-key check: `Authorization: Bearer KEY` or the raw key in the same header.
GET /health and GET / stay open; keys are compared in constant time."""

from __future__ import annotations

import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

OPEN_PATHS = frozenset({"/health", "/"})


def _error(message: str, kind: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": kind}}).encode()


class APIKeyMiddleware:
    def __init__(self, app: ASGIApp, keys: list[str]) -> None:
        self.app = app
        self._keys = [k.encode() for k in keys]

    def _accepts(self, presented: bytes) -> bool:
        matched = False
        for key in self._keys:  # no early exit: every key is compared
            matched |= hmac.compare_digest(presented, key)
        return matched

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        header = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value.strip()
                break
        if not header:
            await self._reject(send, "Missing API key: send it as 'Authorization: Bearer <key>'", "missing_api_key")
            return
        token = header[7:].strip() if header[:7].lower() == b"bearer " else header
        if not self._accepts(token):
            await self._reject(send, "Invalid API key", "invalid_api_key")
            return
        await self.app(scope, receive, send)

    @staticmethod
    async def _reject(send: Send, message: str, kind: str) -> None:
        body = _error(message, kind)
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
