"""The built-in tools of POST /tools (toolbox): globs, listings, reads, edits, searches
and shell commands, on real files and real processes in a temporary folder."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import tracemalloc

import pytest

from mlxcel.toolbox import TOOLS, ParamError, ToolContext, ToolError, build_tools, check_params, tool_names
from mlxcel.toolbox import search as search_module
from mlxcel.toolbox.files import apply_edits
from mlxcel.toolbox.paths import glob_match, list_entries, resolve
from tests.server_process import process_alive

TOOL = build_tools(tuple(TOOLS))


def run(name: str, params: dict, cwd=None, resp_type=None) -> dict:
    tool = TOOL[name]
    check_params(tool, params)
    return asyncio.run(tool.invoke(params, ToolContext(str(cwd) if cwd else None, resp_type)))


@pytest.mark.parametrize("pattern, path, matches", [
    ("*.py", "a/b/c.py", True), ("*.py", "c.pyc", False), ("**", "a/b", True), ("src/*.c", "x/src/a.c", True),
    ("src/*.c", "src/a/b.c", False), ("/src/*.c", "x/src/a.c", False), ("/src/*.c", "src/a.c", True),
    ("**/t/*.md", "t/a.md", True), ("a/**/z.txt", "a/z.txt", True), ("a/**/z.txt", "q/a/b/c/z.txt", True),
    ("?.txt", "ab.txt", False), ("[ab].txt", "b.txt", True), ("[!ab].txt", "b.txt", False), ("[]].txt", "].txt", True),
    ("[z-a].txt", "[z-a].txt", True),  # a class that does not compile matches itself
])
def test_globs_match_names_anywhere_and_paths_anchored(pattern, path, matches):
    assert glob_match(pattern, path) is matches


def test_paths_resolve_against_the_callers_folder(tmp_path):
    assert resolve("a/../b", str(tmp_path)) == tmp_path / "b"
    assert resolve("/x/./y", None).as_posix() == "/x/y"
    assert resolve("~/q", None).as_posix() == os.path.expanduser("~/q")
    for bad in ("", "a\x00b", 3):
        with pytest.raises(ToolError):
            resolve(bad, None)


def test_tool_names_all_or_a_checked_list():
    assert tool_names("all") == tuple(TOOLS)
    assert tool_names(" get_info, read_file ") == ("read_file", "get_info")  # llama-server's order
    for bad in ("", ",", "read_file,rm_rf"):
        with pytest.raises(ValueError):
            tool_names(bad)


def test_arguments_are_checked_against_the_definitions():
    check_params(TOOL["read_file"], {"path": "x", "start_line": 2, "unknown": object()})
    for name, params in (("read_file", {}), ("read_file", {"path": 1}), ("read_file", {"path": "x", "end_line": "9"}),
                         ("read_file", {"path": "x", "append_loc": 1}),
                         ("read_file", {"path": "x", "start_line": True}),
                         ("edit_file", {"path": "x", "edits": {}}), ("exec_shell_command", {"command": "x",
                                                                                          "timeout": 1e300})):
        with pytest.raises(ParamError):
            check_params(TOOL[name], params)


def test_read_file_by_lines_numbered_capped_and_as_base64(tmp_path):
    (tmp_path / "f.txt").write_text("one\ntwo\r\nthree\n")
    assert run("read_file", {"path": "f.txt"}, tmp_path) == {"plain_text_response": "one\ntwo\r\nthree\n"}
    assert run("read_file", {"path": "f.txt", "start_line": 2, "end_line": 2, "append_loc": True},
               tmp_path)["plain_text_response"] == "2\u2192two\r\n"
    assert run("read_file", {"path": "f.txt"}, tmp_path, "base64") == {"base64": "b25lCnR3bw0KdGhyZWUK",
                                                                        "size_bytes": 15}
    big = tmp_path / "big.txt"
    big.write_text("".join(f"line {i}\n" for i in range(20_000)))
    with pytest.raises(ToolError, match="too large"):
        run("read_file", {"path": str(big)})
    part = run("read_file", {"path": str(big), "start_line": 10, "end_line": 11})["plain_text_response"]
    assert part == "line 9\nline 10\n"
    whole = run("read_file", {"path": str(big), "end_line": 20_000})["plain_text_response"]
    assert whole.endswith("[output truncated]") and len(whole) <= 16 * 1024 + 20
    for missing in ("nope.txt", "."):
        with pytest.raises(ToolError):
            run("read_file", {"path": missing}, tmp_path)


def test_a_line_that_never_ends_is_never_held_whole(tmp_path):
    image = tmp_path / "disk.img"
    with image.open("wb") as handle:
        handle.truncate(64 << 20)  # 64 MB of zeros, no newline: a disk image
    with image.open("ab") as handle:
        handle.write(b"\nafter\n")
    tracemalloc.start()
    try:
        first = run("read_file", {"path": str(image), "start_line": 1, "end_line": 1})
        second = run("read_file", {"path": str(image), "start_line": 2, "append_loc": True, "end_line": 9})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert first == {"plain_text_response": "[output truncated]"}
    assert second == {"plain_text_response": "2\u2192after\n"}
    assert peak < 8 << 20  # read a piece at a time, not the 64 MB line whole


def test_write_file_makes_its_folders(tmp_path):
    answer = run("write_file", {"path": "a/b/c.txt", "content": "héllo"}, tmp_path)
    assert answer == {"result": "file written successfully", "path": "a/b/c.txt", "bytes": 6}
    assert (tmp_path / "a/b/c.txt").read_text() == "héllo"
    (tmp_path / "blocker").write_text("")
    with pytest.raises(ToolError, match="failed to write"):
        run("write_file", {"path": "blocker/x.txt", "content": ""}, tmp_path)


def test_edits_apply_exactly_once_each_against_the_original():
    text = "def f():\n    return 1\n\ndef g():\n    return 2\n"
    assert apply_edits(text, [("return 1", "return 10"), ("def g", "def h")], "p") == (
        "def f():\n    return 10\n\ndef h():\n    return 2\n")
    assert apply_edits(text, [("return 2\n", "pass\n")], "p").endswith("    pass\n")
    with pytest.raises(ToolError, match="2 occurrences"):
        apply_edits(text, [("return", "x")], "p")
    with pytest.raises(ToolError, match="could not find edits\\[1\\]"):
        apply_edits(text, [("def f", "x"), ("nowhere", "y")], "p")
    with pytest.raises(ToolError, match="overlap"):
        apply_edits(text, [("def f():\n    return", "x"), ("return 1", "y")], "p")
    with pytest.raises(ToolError, match="no changes"):
        apply_edits(text, [("return 1", "return 1")], "p")


def test_edits_forgive_line_end_blanks_and_typographic_characters_only_where_they_touch():
    text = "a = \u201cq\u201d  \nkeep \u2014 this\u00a0 \nlast"
    # the model wrote ASCII quotes and no trailing blanks: the touched line comes loosened,
    # the untouched line keeps its dash, no-break space and trailing blank
    assert apply_edits(text, [('a = "q"\n', 'a = "r"\n')], "p") == 'a = "r"\nkeep \u2014 this\u00a0 \nlast'
    with pytest.raises(ToolError, match="unique"):  # duplicates that differ only in blanks still count
        apply_edits("x = 1  \nx = 1\n", [("x = 1\n", "y\n")], "p")


def test_many_edits_of_a_large_file_each_cost_one_search(tmp_path):
    text = "".join(f"line {i:07d} of the file\n" for i in range(40_000))  # 1 MB
    edits = [(f"line {i:07d} ", f"LINE {i} ") for i in range(0, 40_000, 100)]
    started = time.monotonic()
    edited = apply_edits(text, edits, "p")
    assert time.monotonic() - started < 5  # the file was loosened again for each edit: 35 s
    assert edited.count("LINE") == 400 and edited.startswith("LINE 0 of the file\nline 0000001 ")
    (tmp_path / "f.txt").write_text(text)
    many = [{"old_text": f"line {i:07d} ", "new_text": "x"} for i in range(1001)]
    with pytest.raises(ToolError, match="at most 1000"):
        run("edit_file", {"path": "f.txt", "edits": many}, tmp_path)


def test_edit_file_checks_its_edits_and_the_file(tmp_path):
    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    assert run("edit_file", {"path": "m.py", "edits": [{"old_text": "1", "new_text": "2"}]}, tmp_path)[
        "edits_applied"] == 1
    assert target.read_text() == "x = 2\n"
    for edits, reason in (([], "non-empty"), ([{"old_text": "", "new_text": "a"}], "must not be empty"),
                          (["x"], "old_text and new_text")):
        with pytest.raises(ToolError, match=reason):
            run("edit_file", {"path": "m.py", "edits": edits}, tmp_path)
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    with pytest.raises(ToolError, match="UTF-8"):
        run("edit_file", {"path": "bin", "edits": [{"old_text": "a", "new_text": "b"}]}, tmp_path)


def _tree(root):
    for rel in ("src/a.py", "src/deep/b.py", "src/deep/c.txt", "node_modules/pkg/x.py", "README.md", "build/o.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"{rel}\nneedle here\n")


def test_listings_skip_junk_folders_or_follow_gitignore(tmp_path):
    _tree(tmp_path)
    files = [e.relative for e in list_entries(tmp_path, 0, "file").entries]
    assert sorted(files) == ["README.md", "src/a.py", "src/deep/b.py", "src/deep/c.txt"]
    assert [e.relative for e in list_entries(tmp_path, 1, "file").entries] == ["README.md"]
    dirs = [e.relative for e in list_entries(tmp_path, 0, "dir").entries]
    assert sorted(dirs) == ["build", "node_modules", "src", "src/deep"]  # listed, never entered
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("*.txt\nbuild/\nnode_modules/\n")
    files = [e.relative for e in list_entries(tmp_path, 0, "file").entries]
    assert sorted(files) == [".gitignore", "README.md", "src/a.py", "src/deep/b.py"]
    with pytest.raises(ToolError):
        list_entries(tmp_path / "README.md", 0, "file")


def test_file_glob_search_lists_limits_and_explains(tmp_path):
    _tree(tmp_path)
    answer = run("file_glob_search", {"path": ".", "include": "*.py"}, tmp_path)
    assert [e["path"] for e in answer["entries"]] == ["src/a.py", "src/deep/b.py"] and answer["base"] == str(tmp_path)
    assert answer["plain_text_response"] == "src/a.py\nsrc/deep/b.py\n\n---\nTotal matches: 2\n"
    limited = run("file_glob_search", {"path": str(tmp_path), "limit": 1, "exclude": "deep/*"})
    assert "[1 results limit reached (2 total matches)" in limited["plain_text_response"]
    assert run("file_glob_search", {"path": ".", "type": "dir", "include": "deep"}, tmp_path)[
        "plain_text_response"].startswith("src/deep/\n")
    for params, reason in (({"path": ".", "type": "link"}, "invalid type"),
                           ({"path": ".", "limit": 0}, "invalid limit"),
                           ({"path": "nowhere"}, "not a directory")):
        with pytest.raises(ToolError, match=reason):
            run("file_glob_search", params, tmp_path)


def test_grep_search_matches_with_context_and_options(tmp_path):
    _tree(tmp_path)
    text = run("grep_search", {"path": ".", "pattern": "NEEDLE", "ignore_case": True, "include": "*.py",
                               "return_line_numbers": True}, tmp_path)["plain_text_response"]
    assert text == "src/a.py:2:needle here\nsrc/deep/b.py:2:needle here\n\n---\nTotal matches: 2\n"
    one = run("grep_search", {"path": "README.md", "pattern": "e.d", "literal": True, "context_lines": 1}, tmp_path)
    assert one["plain_text_response"] == "\n---\nTotal matches: 0\n"
    one = run("grep_search", {"path": "README.md", "pattern": "needle", "context_lines": 1}, tmp_path)
    assert one["plain_text_response"] == "README.md-1-README.md\nREADME.md:2:needle here\n--\n\n---\nTotal matches: 1\n"
    (tmp_path / "many.txt").write_text("hit\n" * 500)
    capped = run("grep_search", {"path": "many.txt", "pattern": "hit"}, tmp_path)["plain_text_response"]
    assert capped.count("many.txt:hit") == 100 and "[100 matches limit reached" in capped
    with pytest.raises(ToolError, match="invalid regex"):
        run("grep_search", {"path": ".", "pattern": "("}, tmp_path)
    with pytest.raises(ToolError, match="does not exist"):
        run("grep_search", {"path": "nowhere", "pattern": "x"}, tmp_path)


def test_a_backtracking_grep_is_killed_at_its_deadline_without_blocking_the_loop(tmp_path, monkeypatch):
    monkeypatch.setattr(search_module, "SEARCH_SECONDS", 1.5)
    (tmp_path / "a.txt").write_text("a" * 40 + "!\n")

    async def both():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        beat = asyncio.create_task(ticker())
        started = time.monotonic()
        try:
            with pytest.raises(ToolError, match="was stopped"):
                await TOOL["grep_search"].invoke({"path": str(tmp_path), "pattern": "(a+)+$"}, ToolContext())
        finally:
            beat.cancel()
        return time.monotonic() - started, ticks

    took, ticks = asyncio.run(both())
    assert 1.4 < took < 5 and ticks > 15  # the loop kept running while the child backtracked


def test_a_backtracking_glob_is_killed_at_its_deadline_too(tmp_path, monkeypatch):
    monkeypatch.setattr(search_module, "SEARCH_SECONDS", 1.5)
    (tmp_path / ("a" * 60)).write_text("")
    started = time.monotonic()
    with pytest.raises(ToolError, match="was stopped"):
        run("file_glob_search", {"path": str(tmp_path), "include": "*a" * 30 + "b"})
    assert time.monotonic() - started < 5
    with pytest.raises(ToolError, match="at most 1024"):
        run("grep_search", {"path": str(tmp_path), "pattern": "x", "exclude": "*" * 1025})
    assert glob_match("**/**/**/*.py", "a.py") and glob_match("src/***/*.py", "x/src/a/b.py")


def test_shell_commands_report_exit_codes_cap_output_and_time_out(tmp_path):
    answer = run("exec_shell_command", {"command": "pwd; echo err >&2; exit 3"}, tmp_path)
    assert answer == {"plain_text_response": f"{tmp_path}\nerr\n\n[exit code: 3]"}
    capped = run("exec_shell_command", {"command": "yes | head -c 100000", "max_output_size": 10})
    assert capped["plain_text_response"] == "y\ny\ny\ny\ny\n\n[output truncated]\n[exit code: 0]"
    started = time.monotonic()
    slow = run("exec_shell_command", {"command": "echo start; sleep 30", "timeout": 1})
    assert time.monotonic() - started < 10
    assert slow["plain_text_response"].startswith("start\n") and slow["plain_text_response"].endswith(
        "[exit due to timed out]")


def test_a_command_that_closes_its_output_still_ends_at_its_deadline():
    started = time.monotonic()
    answer = run("exec_shell_command", {"command": "echo hi; exec > /dev/null 2>&1; sleep 30", "timeout": 1})
    assert answer == {"plain_text_response": "hi\n\n[exit code: -9] [exit due to timed out]"}
    assert time.monotonic() - started < 10


def test_a_shell_stream_closed_early_kills_the_whole_command(tmp_path):
    pids = tmp_path / "pids"

    async def leave_early():
        chunks = TOOL["exec_shell_command"].stream(
            {"command": f"sleep 60 & echo $! > {pids}; echo $$ >> {pids}; echo ready; wait"}, ToolContext())
        assert (await anext(chunks)).startswith("ready")
        await asyncio.wait_for(chunks.aclose(), 10)  # not held open by the backgrounded sleep
        for pid in map(int, pids.read_text().split()):  # checked before the loop closes
            deadline = time.monotonic() + 5
            while process_alive(pid):
                assert time.monotonic() < deadline, f"process {pid} outlived the stream"
                await asyncio.sleep(0.05)

    asyncio.run(leave_early())


def test_get_info_names_the_system_and_folder(tmp_path):
    answer = run("get_info", {}, tmp_path)
    assert answer["cwd"] == str(tmp_path) and answer["os"].startswith(os.uname().sysname)


def test_fifos_and_waiting_files_never_block_a_worker(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    started = time.monotonic()
    for name, params in (("read_file", {"path": str(fifo)}), ("write_file", {"path": str(fifo), "content": "x"}),
                         ("edit_file", {"path": str(fifo), "edits": [{"old_text": "a", "new_text": "b"}]})):
        with pytest.raises(ToolError):
            run(name, params)
    if os.access("/proc/kmsg", os.R_OK):  # a /proc file that waits for the kernel's next message
        try:
            run("read_file", {"path": "/proc/kmsg", "end_line": 1})
        except ToolError:
            pass
    assert time.monotonic() - started < 5
