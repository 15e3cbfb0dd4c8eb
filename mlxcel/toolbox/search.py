"""file_glob_search and grep_search. Both run in a child process with a deadline
(search_worker.py): a model's regular expression or glob can backtrack for ever, a walk
of a huge tree can take minutes, and a child, unlike a thread, can be killed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys

from mlxcel.toolbox.base import RUNNING_GROUPS, ServerTool, ToolContext
from mlxcel.toolbox.paths import ToolError, resolve

SEARCH_MAX = 100
SEARCH_SECONDS = 30
PATTERN_MAX = 1024  # characters of a glob
_ANCHORING = ("A pattern with no '/' (e.g. \"*.cpp\") matches the file's basename at any depth. A pattern containing "
              "'/' matches the full relative path; unless already anchored with \"**/\" or a leading '/', it is "
              "automatically prefixed with \"**/\".")
_SKIPS = ("Automatically skips files ignored by .gitignore (when the directory is inside a git repo) and common junk "
          "directories (.git, node_modules, build, dist, etc.) otherwise.")


class FileGlobSearch(ServerTool):
    name = "file_glob_search"
    display_name = "File search"
    description = (f"Recursively search for files matching a glob pattern under a directory. {_SKIPS} {_ANCHORING} "
                   "Use type=\"dir\" or \"all\" to also list directories; directory entries are suffixed with '/' in "
                   "the output. Note: directory listings do not apply .gitignore filtering.")
    properties = {
        "path": {"type": "string", "description": "Base directory to search in"},
        "include": {"type": "string", "description": "Glob pattern for files to include (e.g. \"*.cpp\" or "
                                                     "\"src/**/*.cpp\"). Default: **"},
        "exclude": {"type": "string", "description": "Glob pattern for files to exclude"},
        "type": {"type": "string", "description": "Entry type to return: \"file\" (default), \"dir\" or \"all\""},
        "max_depth": {"type": "integer", "description": "Maximum depth to descend into subdirectories (default: 0 = "
                                                       "unlimited; 1 = direct children only)"},
        "limit": {"type": "integer", "description": f"Maximum number of results to return, capped at {SEARCH_MAX} "
                                                   f"(default {SEARCH_MAX})"},
    }
    required = ("path",)

    async def invoke(self, params: dict, call: ToolContext) -> dict:
        base = resolve(params["path"], call.cwd)
        kind = params.get("type", "file")
        if kind not in ("file", "dir", "all"):
            raise ToolError(f'invalid type: {kind} (expected "file", "dir" or "all")')
        limit = params.get("limit", SEARCH_MAX)
        if limit < 1:
            raise ToolError(f"invalid limit: {limit} (expected 1 or more)")
        _check_globs(params)
        return await run_search({"kind": "glob", "path": str(base), "type": kind, "limit": min(limit, SEARCH_MAX),
                                 "max_depth": max(0, params.get("max_depth", 0)),
                                 **{k: params[k] for k in ("include", "exclude") if k in params}})


class GrepSearch(ServerTool):
    name = "grep_search"
    display_name = "Grep search"
    description = ("Search for a pattern in files under a path. Returns matching lines with file paths (and, unless "
                   f"searching a single file, paths relative to the given directory). {_SKIPS} include/exclude: a "
                   "pattern with no '/' matches the basename at any depth; a pattern containing '/' matches the full "
                   "relative path (auto-anchored with \"**/\" unless already anchored).")
    properties = {
        "path": {"type": "string", "description": "File or directory to search in"},
        "pattern": {"type": "string", "description": "Pattern to search for (regular expression unless literal is "
                                                     "true)"},
        "include": {"type": "string", "description": "Glob pattern to filter files (default: **)"},
        "exclude": {"type": "string", "description": "Glob pattern to exclude files"},
        "return_line_numbers": {"type": "boolean", "description": "If true, include line numbers in results"},
        "literal": {"type": "boolean", "description": "Treat pattern as a literal string instead of a regular "
                                                     "expression (default: false)"},
        "ignore_case": {"type": "boolean", "description": "Case-insensitive search (default: false)"},
        "context_lines": {"type": "integer", "description": "Number of lines of context to show before and after "
                                                           "each match (default: 0)"},
    }
    required = ("path", "pattern")

    async def invoke(self, params: dict, call: ToolContext) -> dict:
        _check_globs(params)
        return await run_search({**{k: params[k] for k in self.properties if k in params}, "kind": "grep",
                                 "path": str(resolve(params["path"], call.cwd)), "display": params["path"]})


def _check_globs(params: dict) -> None:
    for key in ("include", "exclude"):
        if len(params.get(key, "")) > PATTERN_MAX:
            raise ToolError(f"{key}: a glob of at most {PATTERN_MAX} characters")


async def run_search(job: dict) -> dict:
    """`job` done by a child process, killed if it is not done in SEARCH_SECONDS."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-m", "mlxcel.toolbox.search_worker", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
    RUNNING_GROUPS.add(child.pid)
    try:
        out, _ = await asyncio.wait_for(child.communicate(json.dumps(job).encode()), SEARCH_SECONDS)
    except asyncio.TimeoutError:
        raise ToolError(f"the search took over {SEARCH_SECONDS} s and was stopped; narrow the path or simplify "
                        "the pattern") from None
    finally:
        if child.returncode is None:  # with what it started (git)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signal.SIGKILL)
            await child.wait()
        RUNNING_GROUPS.discard(child.pid)
    try:
        answer = json.loads(out)
    except ValueError:
        raise ToolError("the search failed") from None
    if "error" in answer:
        raise ToolError(answer["error"])
    return answer
