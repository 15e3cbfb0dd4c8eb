"""API-key check: `Authorization: Bearer KEY`, the raw key in the same header, or
`x-api-key: KEY` as Anthropic clients send it. /health, /v1/health and / stay open, as
in llama-server; keys are compared in constant time. A missing key gets a 401 of type
and code `missing_api_key`, a wrong one `invalid_api_key` (llama-server's message,
"Invalid API Key"), as the spec's error table and OpenAI name them; the Anthropic
routes get Anthropic's error shape (`authentication_error`).

The key a request was accepted with is recorded in its scope's state as `api_key_id`
(a short SHA-256 digest, never the key), so that what a key stores stays its own."""

from __future__ import annotations

import hashlib
import hmac
import json

from starlette.types import ASGIApp, Receive, Scope, Send

from mlxcel.http.errors import anthropic_error_body, is_anthropic_path

OPEN_PATHS = frozenset({"/health", "/v1/health", "/"})
INVALID_KEY = "Invalid API Key"  # llama-server's message
MISSING_KEY = "Missing API key: send it as `Authorization: Bearer KEY`"
KEY_ID = "api_key_id"


def key_id(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:32]


def request_key_id(scope: Scope) -> str | None:
    """The digest of the key the request was accepted with; None on a server without keys."""
    return (scope.get("state") or {}).get(KEY_ID)


def _error(path: str, missing: bool) -> bytes:
    if is_anthropic_path(path):
        return json.dumps(anthropic_error_body("authentication_error", "Invalid API key")).encode()
    kind = "missing_api_key" if missing else "invalid_api_key"
    return json.dumps({"error": {"message": MISSING_KEY if missing else INVALID_KEY, "type": kind,
                                 "code": kind}}).encode()


def presented_keys(headers: list[tuple[bytes, bytes]]) -> list[bytes]:
    """The keys a request presents: Authorization (Bearer or raw), then x-api-key."""
    found: dict[bytes, bytes] = {}
    for name, value in headers:
        if name in (b"authorization", b"x-api-key") and name not in found:
            found[name] = value.strip()
    keys = []
    if found.get(b"authorization"):
        header = found[b"authorization"]
        keys.append(header[7:].strip() if header[:7].lower() == b"bearer " else header)
    if found.get(b"x-api-key"):
        keys.append(found[b"x-api-key"])
    return keys


class APIKeyMiddleware:
    def __init__(self, app: ASGIApp, keys: list[str], open_paths: frozenset[str] = OPEN_PATHS) -> None:
        """`open_paths`: answered without a key (health checks)."""
        self.app = app
        self._keys = [k.encode() for k in keys]
        self._open_paths = open_paths

    def _accepts(self, presented: bytes) -> bool:
        matched = False
        for key in self._keys:  # no early exit: every key is compared
            matched |= hmac.compare_digest(presented, key)
        return matched

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (scope["type"] not in ("http", "websocket") or scope.get("method") == "OPTIONS"
                or path in self._open_paths):
            await self.app(scope, receive, send)
            return
        # every presented key is compared
        presented = presented_keys(scope["headers"])
        accepted = [key for key in presented if self._accepts(key)]
        if not accepted:
            body = _error(path, missing=not any(presented))
            if scope["type"] == "websocket":
                await self._reject_handshake(scope, send, body)
            else:
                await self._reject(send, body)
            return
        scope["state"] = {**(scope.get("state") or {}), KEY_ID: key_id(accepted[0])}
        await self.app(scope, receive, send)

    @staticmethod
    def _headers(body: bytes) -> list[tuple[bytes, bytes]]:
        return [(b"content-type", b"application/json; charset=utf-8"),
                (b"content-length", str(len(body)).encode()), (b"www-authenticate", b"Bearer")]

    @classmethod
    async def _reject(cls, send: Send, body: bytes) -> None:
        await send({"type": "http.response.start", "status": 401, "headers": cls._headers(body)})
        await send({"type": "http.response.body", "body": body})

    @classmethod
    async def _reject_handshake(cls, scope: Scope, send: Send, body: bytes) -> None:
        """A WebSocket handshake without a key: the same 401 where the server can answer
        a handshake with a response (ASGI's denial extension), else a policy close."""
        if "websocket.http.response" in (scope.get("extensions") or {}):
            await send({"type": "websocket.http.response.start", "status": 401, "headers": cls._headers(body)})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008})
