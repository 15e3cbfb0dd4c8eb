"""--log-prompts-dir, as llama-server's: each completion's prompt in a file of its own
in the folder, named by the time in milliseconds (`000001764930123456.txt`; a second
prompt in the same millisecond gets `-1`, `-2`, ...). Text as the model reads it: a
chat turn's prompt as its template rendered it, special tokens written out; a request
of several prompts writes them as one JSON list. Files are written on a thread of their
own: the event loop never waits on the disk."""

from __future__ import annotations

import functools
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

log = logging.getLogger("mlxcel.server")


class PromptLog:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="mlxcel-prompt-log")

    def write(self, prompts: list[str]) -> None:
        text = prompts[0] if len(prompts) == 1 else json.dumps(prompts, ensure_ascii=False, indent=2)
        self._writer.submit(self._write, time.time(), text)

    def _write(self, at: float, text: str) -> None:
        stem = f"{int(at * 1000):012d}"
        path, n = self.folder / f"{stem}.txt", 0
        while path.exists():
            n += 1
            path = self.folder / f"{stem}-{n}.txt"
        try:
            path.write_text(text, encoding="utf-8", errors="replace")
        except OSError as exc:
            log.error("failed to create %s: %s", path, exc.strerror or exc)


@functools.cache
def prompt_log(folder: str) -> PromptLog:
    """The process's one log of `folder` (every model of a server writes to it)."""
    return PromptLog(folder)
