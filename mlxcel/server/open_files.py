"""Every client connection is an open file. Many distributions start a process with a
soft limit of 1,024 open files under a far higher hard one, which would refuse a burst
of clients (accept fails with EMFILE, and uvicorn stops accepting for a second) long
before the machine runs out of anything. The server takes the hard limit as its soft
one, up to MAX_OPEN_FILES, as network servers commonly do."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("mlxcel")

MAX_OPEN_FILES = 65536


def raise_open_files_limit() -> int:
    """The soft RLIMIT_NOFILE after raising it towards the hard limit (never lowered)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, MAX_OPEN_FILES)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-files limit from %d to %d: %s", soft, target, exc)
            return soft
        log.info("open-files limit raised from %d to %d", soft, target)
        return target
    return soft
