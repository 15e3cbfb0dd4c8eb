"""Choosing the backend: `--state-url`. None (the default) is the SQLite file
$MLXCEL_HOME/state/mlxcel.sqlite3; `sqlite:///abs/path.sqlite3` another file;
`redis://[:password@]host:port/db` (or rediss:// for TLS) a Redis server, which
must answer at start."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit

from mlxcel.models.store import mlxcel_home
from mlxcel.state.store import StateBackend, StateUnavailable

SCHEMES = ("sqlite", "redis", "rediss")
DEFAULT_FILE = Path("state") / "mlxcel.sqlite3"


class StateUrlError(ValueError):
    """A --state-url that names no backend we have (said at start, in one line)."""


@dataclass(frozen=True)
class StateLocation:
    scheme: str  # sqlite | redis | rediss
    url: str  # as given (may hold a password: never log it)
    path: Path | None = None  # the SQLite file

    @property
    def redacted(self) -> str:
        """The URL without its password (in the address, or as redis-py's `?password=`
        query parameter), for logs and errors."""
        if self.path is not None:
            return f"sqlite://{self.path}"
        parts = urlsplit(self.url)
        if parts.password is not None:  # the host part as written: a bad port must not raise here
            parts = parts._replace(netloc=f"{parts.username or ''}:***@{parts.netloc.rsplit('@', 1)[1]}")
        query = parse_qsl(parts.query, keep_blank_values=True)
        if any(name.lower() == "password" for name, _ in query):
            masked = [(name, "***" if name.lower() == "password" else value) for name, value in query]
            parts = parts._replace(query=urlencode(masked, safe="*"))
        return parts.geturl()


def parse_state_url(url: str | None) -> StateLocation:
    if url is None or not url.strip():
        return StateLocation("sqlite", "", mlxcel_home() / DEFAULT_FILE)
    parts = urlsplit(url.strip())
    if parts.scheme not in SCHEMES:
        raise StateUrlError(f"unknown scheme {parts.scheme or url.strip()!r}: use sqlite:///ABSOLUTE/PATH or "
                            "redis://HOST:PORT/DB")
    if parts.scheme == "sqlite":
        if parts.netloc or not parts.path.startswith("/"):
            raise StateUrlError("a SQLite URL names an absolute path: sqlite:///ABSOLUTE/PATH")
        return StateLocation("sqlite", url, Path("/" + parts.path.lstrip("/")))
    _check_redis(parts)
    return StateLocation(parts.scheme, url.strip())


def _check_redis(parts: SplitResult) -> None:
    """What Redis's client would refuse with a bare ValueError (a traceback at start)."""
    try:
        _ = parts.port  # parsing it is the check
    except ValueError:
        raise StateUrlError("a Redis URL's port is a number: redis://HOST:PORT/DB") from None
    database = parts.path.strip("/")
    if database and not database.isdigit():
        raise StateUrlError(f"a Redis URL's database is a number: redis://HOST:PORT/DB, not {database!r}")


def open_state(url: str | None, namespace: str = "mlxcel") -> StateBackend:
    """The backend `url` names, opened and checked (StateUnavailable when it is not there)."""
    location = parse_state_url(url)
    if location.path is not None:
        import sqlite3

        from mlxcel.state.sqlite_backend import SqliteBackend

        try:
            return SqliteBackend(location.path)
        except (OSError, sqlite3.Error) as exc:
            raise StateUnavailable(f"cannot open the state store {location.redacted}: {exc}") from None
    import redis

    from mlxcel.state.redis_backend import RedisBackend

    client = redis.Redis.from_url(location.url, decode_responses=True, socket_connect_timeout=3, socket_timeout=10,
                                  health_check_interval=30)
    try:
        client.ping()
    except redis.RedisError as exc:
        client.close()
        raise StateUnavailable(f"cannot reach the state store {location.redacted}: {exc}") from None
    return RedisBackend(client, f"redis {location.redacted}", namespace)
