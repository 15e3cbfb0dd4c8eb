"""Stopping `mlxcel serve --replicas` while it starts: SIGTERM is made an interrupt as
Ctrl-C is, and a Ray instance interrupted inside `ray.init` is taken down with every
process it had started, including the agents `ray.shutdown()` does not know yet. Every
stop has a deadline: a Ray shutdown that stalls (seen once in many stops during the
replicas' deploy) does not keep the server from exiting."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

STOP_DEADLINE_S = 40.0  # a stop takes 2-10 s here; past this, Ray's processes are killed
_deadline_armed = threading.Event()


def interrupt_on_sigterm() -> None:
    """Until the server is up, SIGTERM raises KeyboardInterrupt (set again after
    `ray.init`, which installs a handler of its own)."""
    signal.signal(signal.SIGTERM, _interrupt)


def ignore_stop_signals() -> None:
    """Taking Ray down is not to be interrupted in turn."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def arm_stop_deadline(exit_code: int, seconds: float = STOP_DEADLINE_S) -> None:
    """The stop that begins now ends within `seconds`: past them, every process below
    this one is killed and this one exits with `exit_code`, whatever the shutdown is
    still waiting for. Armed once; a later call changes nothing."""
    if _deadline_armed.is_set():
        return
    _deadline_armed.set()

    def expire() -> None:
        time.sleep(seconds)
        print(f"mlxcel: Ray did not stop within {seconds:g} s; its processes were killed", file=sys.stderr,
              flush=True)
        for pid in descendants(os.getpid()):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os._exit(exit_code)

    threading.Thread(target=expire, name="mlxcel-stop-deadline", daemon=True).start()


def abandon_ray_start(ray) -> None:
    """After an interrupt inside `ray.init`: shut Ray down, then kill what is left of
    the processes below this one (collected first, while they are still ours)."""
    arm_stop_deadline(130)
    started = descendants(os.getpid())
    ignore_stop_signals()
    with contextlib.suppress(Exception):
        ray.shutdown()
    for pid in started:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def descendants(root: int) -> list[int]:
    """Every process below `root` (Linux /proc; none elsewhere)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                parent = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
