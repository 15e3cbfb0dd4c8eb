"""Local media files: readable only under the configured roots (--media-path, or
MLXCEL_VIDEO_DIR_ALLOWLIST for video), after symlinks are resolved; `..` refused."""

from __future__ import annotations

import os
import stat

from mlxcel.media.types import MediaError


def resolve(path: str, roots: tuple[str, ...], where: str, what: str) -> str:
    """The real path `path` names if it lies inside one of `roots` (real paths), else a
    MediaError; `what` names the setting that lists the roots, for the message. A
    relative path (llama-server's file://NAME) is taken under each root in turn."""
    if not roots:
        raise MediaError(f"{where}: local media files are refused: the server has no {what}",
                         "local_media_refused")
    if ".." in path.replace("\\", "/").split("/"):
        raise MediaError(f"{where}: '..' is not allowed in a local media path", "local_media_refused")
    if os.path.isabs(path):
        candidate = path
    else:
        joined = [os.path.join(root, path) for root in roots]
        candidate = next((c for c in joined if os.path.lexists(c)), joined[0])
    real = os.path.realpath(candidate)
    if not any(_inside(real, root) for root in roots):
        raise MediaError(f"{where}: local media path is outside the {what} directories (symlinks resolved)",
                         "local_media_refused")
    return real


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def open_regular(real: str, cap: int, where: str) -> int:
    """A read-only descriptor on the regular file at `real` (no symlink followed, no
    FIFO or device opened), after checking its size against `cap`."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except FileNotFoundError:
        raise MediaError(f"{where}: no such local media file", "media_not_found") from None
    except OSError as exc:
        raise MediaError(f"{where}: cannot open the local media file ({exc.strerror})", "media_not_found") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MediaError(f"{where}: the local media path is not a regular file", "local_media_refused")
        if info.st_size > cap:
            raise MediaError(f"{where}: local media file is larger than the {cap}-byte limit", "media_too_large", 413)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(real: str, cap: int, where: str) -> bytes:
    fd = open_regular(real, cap, where)
    with os.fdopen(fd, "rb") as file:
        data = file.read(cap + 1)
    if len(data) > cap:
        raise MediaError(f"{where}: local media file is larger than the {cap}-byte limit", "media_too_large", 413)
    return data
