"""llama-server's --path: files of a folder served as they are. A GET or HEAD whose
path names a file inside the folder (`/`, or a folder's path, its index.html) gets
the file; every other request goes on to the routes. A path that leaves the folder
(`..`, a link pointing out of it) is not served from it."""

from __future__ import annotations

import json
from pathlib import Path

from starlette.responses import FileResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlxcel.http.errors import APIError


class StaticFilesMiddleware:
    def __init__(self, app: ASGIApp, folder: str) -> None:
        self.app = app
        self.root = Path(folder).resolve()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            found = self.file_for(scope["path"])
            if found is not None:
                await FileResponse(found)(scope, receive, _range_errors_as_416(send, found))
                return
        await self.app(scope, receive, send)

    def file_for(self, path: str) -> Path | None:
        """The file under the folder that `path` names, or None."""
        relative = path.lstrip("/")
        if "\x00" in relative or len(relative) > 4096:
            return None
        candidate = self.root / relative if relative else self.root
        try:
            if candidate.is_dir():
                candidate = candidate / "index.html"
            resolved = candidate.resolve(strict=True)
        except (OSError, RuntimeError, ValueError):
            return None
        if not resolved.is_relative_to(self.root) or not resolved.is_file():
            return None
        return resolved


def _range_errors_as_416(send: Send, found: Path) -> Send:
    """A Range header Starlette cannot serve (a 400 or an empty 416 in plain text) answers
    416 in the spec's error format with `Content-Range: bytes */SIZE`, as llama-server
    answers a range it cannot parse or satisfy."""
    refused = False

    async def sending(message: Message) -> None:
        nonlocal refused
        if message["type"] == "http.response.start" and message["status"] in (400, 416):
            refused = True
            error = APIError(416, "the Range header is malformed or outside the file", "invalid_request_error")
            body = json.dumps(error.body()).encode()
            await send({"type": "http.response.start", "status": 416, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                (b"content-range", f"bytes */{found.stat().st_size}".encode())]})
            await send({"type": "http.response.body", "body": body})
        elif not refused:
            await send(message)

    return sending
