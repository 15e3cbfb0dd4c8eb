"""The server's exit while a model is still loading on its thread: the exit code and
what was written reach the caller, without the interpreter's teardown (where llama.cpp's
log callbacks into Python crash the process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(body: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent('''
        import sys, threading, time
        from mlxcel.server.run import _leave
    ''') + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_a_load_still_running_ends_the_process_at_once_with_the_code_and_the_output():
    done = _run('''
        threading.Thread(target=time.sleep, args=(30,), name="mlxcel-rerank-loader", daemon=True).start()
        print("mlxcel: error: could not load the rerank model", file=sys.stderr)
        _leave(1)
        print("not reached", file=sys.stderr)
    ''')
    assert done.returncode == 1
    assert done.stderr == "mlxcel: error: could not load the rerank model\n"


def test_with_nothing_loading_the_code_is_returned():
    done = _run('''
        threading.Thread(target=time.sleep, args=(30,), name="mlxcel-state-lease", daemon=True).start()
        sys.exit(_leave(3) + 4)
    ''')
    assert done.returncode == 7
