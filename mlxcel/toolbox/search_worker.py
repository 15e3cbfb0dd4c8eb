"""The child process a search runs in (grep_search's, file_glob_search's): it reads the
job as JSON on stdin and writes the answer as JSON on stdout; the parent kills it at
the deadline, so neither a walk of a huge tree nor a pattern that backtracks for ever
can hold the server."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from mlxcel.toolbox.paths import ToolError, glob_match, list_entries

MATCHES_MAX = 100
FILE_MAX = 16 << 20  # larger files are skipped
CONTEXT_MAX = 50
LINE_MAX = 2000  # characters of one line shown
OUTPUT_MAX = 256 * 1024


def grep(job: dict) -> str:
    pattern = job["pattern"]
    if job.get("literal"):
        pattern = re.escape(pattern)
    try:
        regex = re.compile(pattern, re.IGNORECASE if job.get("ignore_case") else 0)
    except (re.error, RecursionError, OverflowError) as exc:
        raise ToolError(f"invalid regex: {exc}") from None
    include, exclude = job.get("include", "**"), job.get("exclude", "")
    context = max(0, min(job.get("context_lines", 0), CONTEXT_MAX))
    numbered = job.get("return_line_numbers", False) or context > 0
    root = Path(job["path"])
    if root.is_file():
        files = [(root, job["display"])]
    elif root.is_dir():
        listing = list_entries(root, 0, "file")
        files = [(root / e.relative, e.relative) for e in listing.entries
                 if glob_match(include, e.relative) and not (exclude and glob_match(exclude, e.relative))]
    else:
        raise ToolError(f"path does not exist: {job['display']}")
    out: list[str] = []
    total, full, size = 0, False, 0
    for path, shown in files:
        if full or size > OUTPUT_MAX:
            break
        try:
            if path.stat().st_size > FILE_MAX:
                continue
            lines = path.read_bytes().decode("utf-8", "replace").split("\n")
        except OSError:
            continue
        if lines and lines[-1] == "":
            lines.pop()
        for i, line in enumerate(lines):
            if total >= MATCHES_MAX:
                full = True
                break
            if not regex.search(line):
                continue
            for j in range(max(0, i - context), min(len(lines), i + context + 1)):
                mark = ":" if j == i else "-"
                text = lines[j].rstrip("\r")
                text = text if len(text) <= LINE_MAX else text[:LINE_MAX] + "[...]"
                out.append(f"{shown}{mark}" + (f"{j + 1}{mark}" if numbered else "") + text + "\n")
                size += len(out[-1])
            if context:
                out.append("--\n")
            total += 1
            if size > OUTPUT_MAX:
                out.append("[output truncated]\n")
                break
    text = "".join(out) + f"\n---\nTotal matches: {total}\n"
    if full:
        text += f"[{MATCHES_MAX} matches limit reached. Narrow the path/pattern/include to see more.]\n"
    return text


def glob(job: dict) -> dict:
    """file_glob_search's answer: the matching entries (at most `limit`), their count, and
    the folder they are relative to."""
    base, limit = Path(job["path"]), job["limit"]
    include, exclude = job.get("include", "**"), job.get("exclude", "")
    listing = list_entries(base, job["max_depth"], job["type"])
    matches = [e for e in listing.entries
               if glob_match(include, e.relative) and not (exclude and glob_match(exclude, e.relative))]
    shown = matches[:limit]
    text = "".join(e.relative + ("/" if e.is_dir else "") + "\n" for e in shown)
    text += f"\n---\nTotal matches: {len(matches)}\n"
    if len(matches) > len(shown):
        text += (f"[{len(shown)} results limit reached ({len(matches)} total matches). Refine the glob pattern to "
                 "narrow the search.]\n")
    if listing.truncated:
        text += "[results truncated: time budget or unreadable directory]\n"
    return {"plain_text_response": text, "base": str(base),
            "entries": [{"path": e.relative, "type": "dir" if e.is_dir else "file"} for e in shown]}


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    try:
        answer = glob(job) if job.pop("kind") == "glob" else {"plain_text_response": grep(job)}
    except ToolError as exc:
        answer = {"error": str(exc)}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
