"""Guards for the routes that act on this machine for the web UI (POST /tools runs
commands, /cors-proxy reaches other servers): a page on a site the CORS policy does not
allow must not use them. CORS only keeps a page from reading an answer; the request
itself still goes out, so these routes refuse it before doing anything."""

from __future__ import annotations

from starlette.requests import Request

from mlxcel.http.errors import APIError
from mlxcel.media.addresses import parse_address


def check_page_origin(request: Request, what: str) -> None:
    """A 403 when the request comes from a page the CORS policy (--cors-origins) does not
    allow: by its `Origin`, or, for a request a browser sends without one (an image, a
    link, a form), by its `Sec-Fetch-Site` and `Sec-Fetch-Mode`; or, on a server that
    listens on loopback only, when it is addressed by a name that is not local (see
    `check_local_host`). Clients that are not browsers send neither and pass."""
    check_local_host(request, what)
    origin = request.headers.get("origin")
    if origin is not None:
        if request.app.state.cors_policy.allowed_origin(origin) is None:
            raise APIError(403, f"{what} cannot be used from a page at {origin[:200]}: the CORS policy does not "
                                "allow it (--cors-origins)", "permission_error")
        return
    site = request.headers.get("sec-fetch-site")
    mode = request.headers.get("sec-fetch-mode")
    if site not in (None, "same-origin", "none") or mode not in (None, "cors", "same-origin", "navigate"):
        raise APIError(403, f"{what} cannot be used from another site's page (Sec-Fetch-Site: {str(site)[:40]})",
                       "permission_error")


def check_local_host(request: Request, what: str) -> None:
    """DNS rebinding: a page on another site whose name its DNS then points at 127.0.0.1
    is same-origin with this server, so a browser sends its GETs with no Origin (and, over
    plain http, no Sec-Fetch headers) and lets it read the answers. Such a request still
    names that site in its Host. A server listening on loopback only is reached by local
    names alone (an address, `localhost`, or a name --host gave), so any other Host is a
    403 here; a server listening elsewhere is reached by whatever names point at it."""
    hosts = request.app.state.config.hosts
    if not all(_is_loopback(host) for host in hosts):
        return
    name = _host_name(request.headers.get("host"))
    if name is None or name in hosts or name == "localhost" or name.endswith(".localhost"):
        return
    if parse_address(name) is not None:
        return
    raise APIError(403, f"{what} answers only requests sent to this machine by a local name, not to {name[:100]!r} "
                        "(a page whose site name was pointed at this machine)", "permission_error")


def _is_loopback(host: str) -> bool:
    if host.endswith(".sock") or host == "localhost":
        return True  # a UNIX socket: no browser reaches it
    address = parse_address(host)
    return address is not None and address.is_loopback


def _host_name(header: str | None) -> str | None:
    """The name of a Host header (no port, no IPv6 brackets, lower case); None without one."""
    if not header:
        return None
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class RunningCap:
    """At most `limit` of something running at once; one more is answered 429."""

    def __init__(self, limit: int, what: str) -> None:
        self.limit = limit
        self.what = what
        self.count = 0

    def enter(self) -> None:
        if self.count >= self.limit:
            raise APIError(429, f"{self.limit} {self.what} are running; try again when one ends", "rate_limit_error",
                           retry_after=1)
        self.count += 1

    def leave(self) -> None:
        self.count -= 1
