"""Where downloaded or inline video is written before the decoder reads it: a
create-new (O_CREAT | O_EXCL) 0600 file inside a fresh private 0700 directory, both
removed afterwards."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import BinaryIO


@contextlib.contextmanager
def private_file(temp_dir: str | None) -> Iterator[tuple[BinaryIO, str]]:
    """A new file open for writing and its path; both gone when the block ends."""
    directory = tempfile.mkdtemp(prefix="mlxcel-media-", dir=temp_dir)  # created 0700
    try:
        os.chmod(directory, 0o700)
        path = os.path.join(directory, "media")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags, 0o600)
        with os.fdopen(fd, "wb") as file:
            yield file, path
    finally:
        shutil.rmtree(directory, ignore_errors=True)
