"""One warning line per request naming the fields it sent that change nothing here."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable

log = logging.getLogger("mlxcel.server")


def warn_ignored_fields(
    data: dict,
    honored: Collection[str],
    request_id: str,
    ignored: Collection[str] = (),
    extra: Iterable[str] = (),
) -> None:
    """Names every key of `data` that is listed in `ignored` or not in `honored`,
    plus any `extra` notes, in one warning line (none when there is nothing)."""
    names = sorted(k for k in data if k in ignored or k not in honored)
    names.extend(extra)
    if names:
        log.warning("request %s: accepted but ignored fields: %s", request_id, ", ".join(names))
