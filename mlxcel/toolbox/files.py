"""read_file, write_file and edit_file: a file's text by lines, a whole new file, and
exact replacements that must each match once (whitespace at line ends and typographic
quotes, dashes and spaces forgiven when nothing matches exactly)."""

from __future__ import annotations

import asyncio
import base64
import bisect
import errno
import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from mlxcel.toolbox.base import ServerTool, ToolContext
from mlxcel.toolbox.paths import ToolError, resolve

READ_MAX = 16 * 1024  # the text one read_file gives back
READ_BASE64_MAX = 32 << 20  # a whole file for the UI (x-resp-type: base64)
WRITE_MAX = 16 << 20
EDITS_MAX = 1000  # edits in one edit_file call: each is counted in the whole file


class ReadFile(ServerTool):
    name = "read_file"
    display_name = "Read file"
    description = ("Read the contents of a file. Optionally specify a 1-based line range. "
                   "If append_loc is true, each line is prefixed with its line number (e.g. \"1\u2192...\").")
    properties = {
        "path": {"type": "string", "description": "Path to the file"},
        "start_line": {"type": "integer", "description": "First line to read, 1-based (default: 1)"},
        "end_line": {"type": "integer", "description": "Last line to read, 1-based inclusive (default: end of file)"},
        "append_loc": {"type": "boolean", "description": "Prefix each line with its line number"},
    }
    required = ("path",)

    async def invoke(self, params: dict, call: ToolContext) -> dict:
        path = resolve(params["path"], call.cwd)
        return await asyncio.to_thread(self._read, path, params, call.resp_type == "base64")

    @staticmethod
    def _read(path: Path, params: dict, as_base64: bool) -> dict:
        given = params["path"]
        try:
            size = path.stat().st_size
        except OSError:
            raise ToolError(f"cannot stat file: {given}") from None
        if not path.is_file():
            raise ToolError(f"not a regular file: {given}")
        if as_base64:
            if size > READ_BASE64_MAX:
                raise ToolError(f"file too large ({size} bytes, max {READ_BASE64_MAX})")
            data = _read_bytes(path, given, READ_BASE64_MAX)
            return {"base64": base64.b64encode(data).decode("ascii"), "size_bytes": len(data)}
        start, end = params.get("start_line", 1), params.get("end_line", -1)
        if size > READ_MAX and end == -1:
            raise ToolError(f"file too large ({size} bytes, max {READ_MAX}). Use start_line/end_line to read a "
                            "portion.")
        numbered = params.get("append_loc", False)
        out: list[str] = []
        used = 0
        try:
            with _open_regular(path, os.O_RDONLY) as handle:
                for number, line in enumerate(_capped_lines(handle, READ_MAX + 1), 1):
                    if number < start:
                        continue
                    if end != -1 and number > end:
                        break
                    text = line.rstrip("\n")
                    text = (f"{number}\u2192" if numbered else "") + text + "\n"
                    used += len(text.encode("utf-8", "surrogatepass"))
                    if used > READ_MAX:
                        out.append("[output truncated]")
                        break
                    out.append(text)
        except OSError:
            raise ToolError(f"failed to open file: {given}") from None
        return {"plain_text_response": "".join(out)}


def _capped_lines(handle: io.BufferedReader, cap: int) -> Iterator[str]:
    """The lines of `handle`, split at "\\n" as llama-server's read_file splits them, each
    cut at `cap` bytes and the rest of it read and dropped, so a line that never ends (a
    disk image, a minified bundle) is never held in memory whole; a cut line is over
    read_file's budget anyway."""
    while line := handle.readline(cap):
        if len(line) >= cap and not line.endswith(b"\n"):
            while (rest := handle.readline(cap)) and not rest.endswith(b"\n"):
                pass
        yield line.decode("utf-8", "replace")


def _open_regular(path: Path, flags: int):
    """A regular file, opened and read without blocking: a FIFO, a device or a /proc file
    that waits for data (/proc/kmsg) could hold a worker thread for ever, and threads
    cannot be killed. (Regular files on disk ignore O_NONBLOCK.)"""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return os.fdopen(fd, "rb" if flags == os.O_RDONLY else "wb")
    except BaseException:
        os.close(fd)
        raise


def _read_bytes(path: Path, given: str, limit: int) -> bytes:
    try:
        with _open_regular(path, os.O_RDONLY) as handle:
            return handle.read(limit + 1)[:limit]
    except OSError:
        raise ToolError(f"failed to open file: {given}") from None


def _write(path: Path, given: str, text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) > WRITE_MAX:
        raise ToolError(f"content too large ({len(data)} bytes, max {WRITE_MAX})")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) as handle:
            handle.write(data)
    except OSError as exc:
        raise ToolError(f"failed to write file: {given}: {exc.strerror or exc}") from None


class WriteFile(ServerTool):
    name = "write_file"
    display_name = "Write file"
    writes = True
    description = ("Write content to a file, creating it (including parent directories) if it does not exist. "
                   "May use with edit_file for more complex edits.")
    properties = {
        "path": {"type": "string", "description": "Path of the file to write"},
        "content": {"type": "string", "description": "Content to write"},
    }
    required = ("path", "content")

    async def invoke(self, params: dict, call: ToolContext) -> dict:
        path, content = resolve(params["path"], call.cwd), params["content"]
        await asyncio.to_thread(_write, path, params["path"], content)
        return {"result": "file written successfully", "path": params["path"],
                "bytes": len(content.encode("utf-8", "surrogatepass"))}


# typographic characters a model may write for the ASCII ones a file holds
_FUZZY = str.maketrans({**dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
                        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
                        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
                        **dict.fromkeys("\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000",
                                        " ")})


def fuzzy(text: str) -> str:
    """Each line without trailing blanks, with typographic quotes, dashes and spaces as
    ASCII; the line count stays, so a line of this is a line of the original."""
    return "\n".join(line.rstrip(" \t\r").translate(_FUZZY) for line in text.split("\n"))


def _count(text: str, needle: str) -> int:
    return text.count(needle) if needle else 0


def apply_edits(original: str, edits: list[tuple[str, str]], path: str) -> str:
    """The file's new text, or a ToolError saying which edit cannot apply."""
    loose_original = fuzzy(original)  # once: every edit's uniqueness is counted in it
    loose = any(old not in original for old, _ in edits)
    if loose:
        for i, (old, _) in enumerate(edits):
            if old not in original and fuzzy(old) not in loose_original:
                raise ToolError(f"could not find edits[{i}].old_text in {path}, it must match the file's current "
                                "content exactly")
    base = loose_original if loose else original
    spans = []
    for i, (old, new) in enumerate(edits):
        found = _count(loose_original, fuzzy(old))
        if found > 1:
            raise ToolError(f"found {found} occurrences of edits[{i}].old_text in {path}, it must be unique")
        needle = fuzzy(old) if loose else old
        at = base.find(needle)
        if at < 0:
            raise ToolError(f"could not find edits[{i}].old_text in {path}")
        spans.append((at, len(needle), new, i))
    spans.sort()
    for (start, length, _, i), (next_start, _, _, j) in zip(spans, spans[1:]):
        if start + length > next_start:
            raise ToolError(f"edits[{i}] and edits[{j}] overlap in {path}; merge them into one edit or target "
                            "disjoint regions")
    result = _replace(base, spans) if not loose else _replace_lines(original, base, spans)
    if result == original:
        raise ToolError("no changes made: the replacement(s) produced identical content")
    return result


def _replace(text: str, spans: list) -> str:
    out, at = [], 0
    for start, length, new, _ in spans:
        out += [text[at:start], new]
        at = start + length
    return "".join(out) + text[at:]


def _lines(text: str) -> list[str]:
    """The lines with their newlines, so joining them gives the text back."""
    parts = text.split("\n")
    return [line + "\n" for line in parts[:-1]] + [parts[-1]]


def _replace_lines(original: str, base: str, spans: list) -> str:
    """Replacements found in the loosened text: the lines they touch come from it, every
    other line from the original as it was."""
    loosened, originals = _lines(base), _lines(original)
    starts = [0]
    for line in loosened[:-1]:
        starts.append(starts[-1] + len(line))

    def line_of(offset: int) -> int:
        return bisect.bisect_right(starts, offset) - 1

    groups: list[list] = []  # [first line, last line, spans]
    for span in spans:
        first, last = line_of(span[0]), line_of(span[0] + max(span[1] - 1, 0))
        if groups and first <= groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], last)
            groups[-1][2].append(span)
        else:
            groups.append([first, last, [span]])
    out: list[str] = []
    line = 0
    for first, last, group in groups:
        out += originals[line:first]
        offset = starts[first]
        chunk = "".join(loosened[first:last + 1])
        out.append(_replace(chunk, [(s - offset, n, new, i) for s, n, new, i in group]))
        line = last + 1
    out += originals[line:]
    return "".join(out)


class EditFile(ServerTool):
    name = "edit_file"
    display_name = "Edit file"
    writes = True
    description = ("Edit a file using exact text replacement. Each edits[].old_text must be unique in the file and is "
                   "matched against the original content, not incrementally. Merge nearby changes into one edit "
                   "instead of overlapping edits. Use write_file to replace the whole file.")
    properties = {
        "path": {"type": "string", "description": "Path to the file to edit"},
        "edits": {"type": "array", "description": "One or more exact text replacements to apply", "items": {
            "type": "object",
            "properties": {
                "old_text": {"type": "string", "description": "Exact text to find; must be unique in the file and "
                                                              "must not overlap with other edits"},
                "new_text": {"type": "string", "description": "Text to replace old_text with"},
            },
            "required": ["old_text", "new_text"],
        }},
    }
    required = ("path", "edits")

    async def invoke(self, params: dict, call: ToolContext) -> dict:
        if len(params["edits"]) > EDITS_MAX:
            raise ToolError(f'"edits" holds {len(params["edits"])} edits, at most {EDITS_MAX} in one call')
        edits = []
        for i, edit in enumerate(params["edits"]):
            if not isinstance(edit, dict) or not all(isinstance(edit.get(k), str) for k in ("old_text", "new_text")):
                raise ToolError(f"edits[{i}] must be an object with old_text and new_text strings")
            if not edit["old_text"]:
                raise ToolError(f"edits[{i}].old_text must not be empty")
            edits.append((edit["old_text"], edit["new_text"]))
        if not edits:
            raise ToolError('"edits" must be a non-empty array')
        path, given = resolve(params["path"], call.cwd), params["path"]
        await asyncio.to_thread(self._edit, path, given, edits)
        return {"result": "file edited successfully", "path": given, "edits_applied": len(edits)}

    @staticmethod
    def _edit(path: Path, given: str, edits: list[tuple[str, str]]) -> None:
        if not path.is_file() or os.path.getsize(path) > WRITE_MAX:
            raise ToolError(f"failed to open file: {given}")
        data = _read_bytes(path, given, WRITE_MAX)
        try:
            original = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{given} is not UTF-8 text") from None
        _write(path, given, apply_edits(original, edits, given))
