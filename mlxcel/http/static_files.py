"""llama-server's --path: files of a folder served as they are. A GET or HEAD whose
path names a file inside the folder (`/`, or a folder's path, its index.html) gets
the file; every other request goes on to the routes. A path that leaves the folder
(`..`, a link pointing out of it) is not served from it."""

from __future__ import annotations

from pathlib import Path

from starlette.responses import FileResponse
from starlette.types import ASGIApp, Receive, Scope, Send


class StaticFilesMiddleware:
    def __init__(self, app: ASGIApp, folder: str) -> None:
        self.app = app
        self.root = Path(folder).resolve()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD"):
            found = self.file_for(scope["path"])
            if found is not None:
                await FileResponse(found)(scope, receive, send)
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
