"""One warning line per request naming the fields it sent that change nothing here:
at most MAX_NAMED of them, each cut to MAX_NAME_CHARS, so a body of many long keys
cannot write a log line its own size on every request."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable

log = logging.getLogger("mlxcel.server")

MAX_NAMED = 16
MAX_NAME_CHARS = 64


def _shown(name: str) -> str:
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS] + "..."


def warn_ignored_fields(
    data: dict,
    honored: Collection[str],
    request_id: str,
    ignored: Collection[str] = (),
    extra: Iterable[str] = (),
) -> None:
    """Names every key of `data` that is listed in `ignored` or not in `honored`,
    plus any `extra` notes, in one warning line (none when there is nothing)."""
    names = [_shown(k) for k in sorted(k for k in data if k in ignored or k not in honored)]
    if len(names) > MAX_NAMED:
        names[MAX_NAMED:] = [f"and {len(names) - MAX_NAMED} more"]
    names.extend(extra)
    if names:
        log.warning("request %s: accepted but ignored fields: %s", request_id, ", ".join(names))
