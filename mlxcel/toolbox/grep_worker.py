"""grep_search's child process: reads the search as JSON on stdin and writes its answer
as JSON on stdout. The parent kills it at the deadline."""

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


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    try:
        answer = {"plain_text_response": grep(job)}
    except ToolError as exc:
        answer = {"error": str(exc)}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
