"""Stopping `mlxcel serve --replicas` while it starts: SIGTERM is made an interrupt as
Ctrl-C is, and a Ray instance interrupted inside `ray.init` is taken down with every
process it had started, including the agents `ray.shutdown()` does not know yet."""

from __future__ import annotations

import contextlib
import os
import signal


def interrupt_on_sigterm() -> None:
    """Until the server is up, SIGTERM raises KeyboardInterrupt (set again after
    `ray.init`, which installs a handler of its own)."""
    signal.signal(signal.SIGTERM, _interrupt)


def ignore_stop_signals() -> None:
    """Taking Ray down is not to be interrupted in turn."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def abandon_ray_start(ray) -> None:
    """After an interrupt inside `ray.init`: shut Ray down, then kill what is left of
    the processes below this one (collected first, while they are still ours)."""
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
