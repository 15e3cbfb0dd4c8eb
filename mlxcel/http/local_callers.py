"""Guards for the routes that act on this machine for the web UI (POST /tools runs
commands, /cors-proxy reaches other servers): a page on a site the CORS policy does not
allow must not use them. CORS only keeps a page from reading an answer; the request
itself still goes out, so these routes refuse it before doing anything."""

from __future__ import annotations

from starlette.requests import Request

from mlxcel.http.errors import APIError


def check_page_origin(request: Request, what: str) -> None:
    """A 403 when the request comes from a page the CORS policy (--cors-origins) does not
    allow: by its `Origin`, or, for a request a browser sends without one (an image, a
    link, a form), by its `Sec-Fetch-Site` and `Sec-Fetch-Mode`. Clients that are not
    browsers send neither and pass."""
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
