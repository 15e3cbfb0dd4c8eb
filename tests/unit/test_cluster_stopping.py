"""The stop deadline of `mlxcel serve --replicas`: a shutdown that stalls still ends the
process, with every process below it killed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

STALLED_STOP = textwrap.dedent("""
    import subprocess, sys, time
    from mlxcel.cluster.stopping import arm_stop_deadline
    child = subprocess.Popen(["sleep", "120"])
    print(child.pid, flush=True)
    arm_stop_deadline(130, seconds=1.0)
    arm_stop_deadline(0, seconds=0.1)  # a second stop changes nothing
    time.sleep(120)  # the shutdown that never returns
""")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except FileNotFoundError:
        return True


def test_a_stalled_stop_exits_at_its_deadline_and_kills_what_it_started():
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-c", STALLED_STOP], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    elapsed = time.monotonic() - started
    assert process.returncode == 130, err
    assert 0.9 <= elapsed < 30
    assert "Ray did not stop within 1 s; its processes were killed" in err
    child = int(out.split()[0])
    deadline = time.monotonic() + 5
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child)
