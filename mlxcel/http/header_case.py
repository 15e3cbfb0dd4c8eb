"""Response header names sent on the wire in the casing given here.

llama-server writes `Access-Control-Allow-Origin`, `Process-Start-Time-Unix` and
friends in that casing, and some llama.cpp clients compare header names
case-sensitively. Starlette lowercases names it builds, and uvicorn's httptools
protocol lowercases each name (`name.lower()`) before writing it; h11 keeps the
casing it is given. A name that is a `CasedName` survives both: its `lower()` is
itself. Only names that are none of the framing headers uvicorn inspects
(content-length, transfer-encoding, connection) may be cased this way."""

from __future__ import annotations


class CasedName(bytes):
    """A header name whose `lower()` keeps its casing."""

    def lower(self) -> bytes:  # type: ignore[override]
        return self


def cased(name: str) -> CasedName:
    if name.lower() in ("content-length", "transfer-encoding", "connection"):
        raise ValueError(f"{name} is a framing header: its casing is the server's")
    return CasedName(name.encode("latin-1"))
