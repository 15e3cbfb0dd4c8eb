"""Paths as the tools see them: resolved against the caller's working directory, globs
matched as llama-server's tools match them, and directory listings that follow
.gitignore inside a git work tree and skip build and dependency folders elsewhere."""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

LIST_SECONDS = 15  # one listing's time budget, git's and the walker's together
GIT_OUTPUT_MAX = 8 << 20
# folders a walk lists but never enters: they can be enormous
JUNK_DIRS = frozenset({".git", ".svn", ".hg", "node_modules", "__pycache__", ".venv", "venv", "dist", "build",
                       "target", ".cache", ".idea", ".vscode"})


class ToolError(Exception):
    """A call the tool cannot do: answered as {"error": message}, as llama-server's tools do."""


def resolve(path: str, cwd: str | None) -> Path:
    """`~` expanded, relative to `cwd` (else the server's working directory), `.` and `..`
    folded away; always absolute."""
    if not isinstance(path, str) or not path:
        raise ToolError("path must be a non-empty string")
    if "\x00" in path:
        raise ToolError("path must not hold a NUL character")
    given = Path(os.path.expanduser(path))
    if not given.is_absolute():
        given = Path(cwd or os.getcwd()) / given
    return Path(os.path.normpath(given))


@lru_cache(maxsize=256)
def _glob_regex(pattern: str) -> re.Pattern:
    pattern = re.sub(r"(\*\*/)+", "**/", re.sub(r"\*{3,}", "**", pattern))  # runs of stars match the same
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")  # any number of folders, none included
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[" and pattern.find("]", i + 2) > 0:  # a class; a ']' right after '[' is in it
            end = pattern.find("]", i + 2)
            body = pattern[i + 1:end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    try:
        return re.compile("".join(out), re.DOTALL)
    except re.error:  # a class that does not compile matches only itself
        return re.compile(re.escape(pattern))


def glob_match(pattern: str, relative: str) -> bool:
    """A pattern without '/' matches an entry's name at any depth; one with '/' matches its
    whole relative path, anchored with "**/" unless it starts with "**/" or '/'."""
    if "/" not in pattern:
        return _glob_regex(pattern).fullmatch(relative.rsplit("/", 1)[-1]) is not None
    if pattern != "**" and not pattern.startswith("**/"):
        pattern = pattern[1:] if pattern.startswith("/") else "**/" + pattern
    return _glob_regex(pattern).fullmatch(relative) is not None


@dataclass(frozen=True)
class Entry:
    relative: str  # '/'-separated, under the listing's base
    is_dir: bool


@dataclass
class Listing:
    entries: list[Entry]
    truncated: bool = False  # out of time, or a folder could not be read


def depth(relative: str) -> int:
    return relative.count("/") + 1


def list_entries(base: Path, max_depth: int, kind: str) -> Listing:
    """Entries under `base` (a folder): "file", "dir" or "all"; max_depth 0 is unlimited.
    Files come from `git ls-files` when `base` is in a git work tree (so .gitignore holds)."""
    if not base.is_dir():
        raise ToolError(f"path does not exist or is not a directory: {base}")
    deadline = time.monotonic() + LIST_SECONDS
    if kind == "file":
        listed = _git_files(base)
        if listed is not None:
            entries = [Entry(rel, False) for rel in listed
                       if (max_depth == 0 or depth(rel) <= max_depth) and (base / rel).is_file()]
            return Listing(entries)
    return _walk(base, max_depth, kind, deadline)


def _git_files(base: Path) -> list[str] | None:
    try:
        done = subprocess.run(["git", "-C", str(base), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                              capture_output=True, timeout=LIST_SECONDS, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0 or len(done.stdout) > GIT_OUTPUT_MAX:
        return None
    return [name.decode("utf-8", "surrogateescape") for name in done.stdout.split(b"\0") if name]


def _walk(base: Path, max_depth: int, kind: str, deadline: float) -> Listing:
    listing = Listing([])
    stack: list[tuple[Path, str, int]] = [(base, "", 0)]
    while stack:
        folder, prefix, level = stack.pop()
        try:
            children = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            listing.truncated = True
            continue
        deeper: list[tuple[Path, str, int]] = []
        for child in children:
            if time.monotonic() > deadline:
                listing.truncated = True
                return listing
            relative = prefix + child.name
            try:
                is_dir = child.is_dir()
                is_file = not is_dir and child.is_file()
            except OSError:
                continue
            if is_dir:
                if kind in ("dir", "all"):
                    listing.entries.append(Entry(relative, True))
                if child.name in JUNK_DIRS or child.is_symlink():  # a link can loop back to an ancestor
                    continue
                if max_depth == 0 or level + 1 < max_depth:
                    deeper.append((Path(child.path), relative + "/", level + 1))
            elif is_file and kind in ("file", "all"):
                listing.entries.append(Entry(relative, False))
        stack.extend(reversed(deeper))  # folders walked in name order
    return listing
