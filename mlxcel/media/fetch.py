"""Remote media over http(s) under the address policy. Each host is resolved once and
every address it resolves to is vetted; the connection goes to the vetted address
itself (the Host header and the TLS server name and certificate check stay those of
the URL's host), so no second DNS answer can slip in between check and connect; the
socket's peer is checked again once connected. Redirects are followed here, at most
`max_redirects`, each hop vetted the same way. A body is capped in bytes (the
Content-Length first, then what arrives) and the whole fetch by a deadline, at which a
timer shuts the socket so no read outlives it."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from urllib.parse import quote, urljoin, urlsplit

from mlxcel.media.addresses import is_public, parse_address
from mlxcel.media.types import MediaError

Resolver = Callable[[str, int], Iterable]
_REDIRECTS = {301, 302, 303, 307, 308}
_CHUNK = 64 * 1024
_PRIVATE_HINT = "set MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1 to allow it"
_tls_context: ssl.SSLContext | None = None


def default_resolver(host: str, port: int) -> list:
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


class FetchGuard:
    """Cuts a fetch short from another thread (the deadline timer, or the loader when
    a sibling part failed): `trip()` shuts the socket being read, so a blocked read
    returns at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.tripped = False

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock
            if self.tripped:
                _shutdown(sock)

    def trip(self) -> None:
        with self._lock:
            self.tripped = True
            if self._sock is not None:
                _shutdown(self._sock)


def _shutdown(sock: socket.socket) -> None:
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the descriptor's, below any TLS layer
    except OSError:
        pass


@dataclass
class FetchPolicy:
    allow_private: bool
    max_redirects: int
    timeout_s: float
    resolver: Resolver = default_resolver


def fetch(url: str, cap: int, policy: FetchPolicy, guard: FetchGuard, sink: Callable[[bytes], object],
          where: str) -> None:
    """Stream the body `url` answers into `sink`; a MediaError for a refused address, a
    failure, a body over `cap` bytes (413) or a fetch past `policy.timeout_s`."""
    deadline = time.monotonic() + policy.timeout_s
    timer = threading.Timer(policy.timeout_s, guard.trip)
    timer.daemon = True
    timer.start()
    try:
        for _ in range(policy.max_redirects + 1):
            location = _get(url, cap, policy, guard, sink, where, deadline)
            if location is None:
                return
            url = location
        raise MediaError(f"{where}: the media URL redirected more than {policy.max_redirects} times",
                         "media_fetch_failed")
    except (OSError, http.client.HTTPException, ssl.CertificateError) as exc:
        if guard.tripped or time.monotonic() >= deadline:
            raise _timeout(policy, where) from None
        raise MediaError(f"{where}: fetching the media URL failed ({type(exc).__name__}: {exc})",
                         "media_fetch_failed") from None
    finally:
        timer.cancel()


def _timeout(policy: FetchPolicy, where: str) -> MediaError:
    return MediaError(f"{where}: fetching the media URL took longer than {policy.timeout_s:g} s", "media_timeout")


def _get(url: str, cap: int, policy: FetchPolicy, guard: FetchGuard, sink: Callable[[bytes], object],
         where: str, deadline: float) -> str | None:
    """One hop: the body into `sink` and None, or the redirect's absolute target."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise MediaError(f"{where}: the media URL redirected to a non-http(s) URL", "media_url_refused")
    try:
        host = (parts.hostname or "").encode("idna").decode("ascii")
        port = parts.port or (443 if scheme == "https" else 80)
    except (UnicodeError, ValueError):
        raise MediaError(f"{where}: the media URL's host or port is malformed", "invalid_media_url") from None
    if not host:
        raise MediaError(f"{where}: the media URL has no host", "invalid_media_url")
    pin = _Pin(_vet(host, port, policy, where), policy, guard, deadline, where)
    conn = _PinnedHTTPS(host, port, pin) if scheme == "https" else _PinnedHTTP(host, port, pin)
    try:
        target = quote(parts.path or "/", safe="/%!$&'()*+,;=:@~-._") + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", target, headers={"User-Agent": "mlxcel", "Accept": "*/*",
                                             "Accept-Encoding": "identity", "Connection": "close"})
        response = conn.getresponse()
        if response.status in _REDIRECTS:
            location = (response.getheader("Location") or "").strip()
            if not location:
                raise MediaError(f"{where}: the media URL redirected without a Location", "media_fetch_failed")
            return urljoin(url, location)
        if not 200 <= response.status < 300:
            raise MediaError(f"{where}: the media URL answered HTTP {response.status}", "media_fetch_failed")
        length = (response.getheader("Content-Length") or "").strip()
        if length.isdigit() and int(length) > cap:
            raise _too_large(cap, where)
        received = 0
        while chunk := response.read(_CHUNK):
            received += len(chunk)
            if received > cap:
                raise _too_large(cap, where)
            if time.monotonic() >= deadline:
                raise _timeout(policy, where)
            sink(chunk)
        if guard.tripped:  # a shut socket reads as the end of the body
            raise _timeout(policy, where)
        return None
    finally:
        conn.close()


def _too_large(cap: int, where: str) -> MediaError:
    return MediaError(f"{where}: the remote media is larger than the {cap}-byte limit", "media_too_large", 413)


def _vet(host: str, port: int, policy: FetchPolicy, where: str) -> list[IPv4Address | IPv6Address]:
    """The addresses `host` stands for, all public (or the policy allows private ones)."""
    literal = parse_address(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            infos = policy.resolver(host, port)
        except (OSError, UnicodeError):
            raise MediaError(f"{where}: cannot resolve the media URL's host {host!r}", "media_fetch_failed") from None
        addresses = []
        for info in infos:
            address = parse_address(info if isinstance(info, str) else info[4][0])
            if address is not None and address not in addresses:
                addresses.append(address)
    if not addresses:
        raise MediaError(f"{where}: the media URL's host {host!r} has no address", "media_fetch_failed")
    if not policy.allow_private and not all(is_public(a) for a in addresses):
        raise MediaError(f"{where}: the media URL's host {host!r} is or resolves to a non-public address; "
                         f"{_PRIVATE_HINT}", "media_url_refused")
    return addresses


class _Pin:
    """The vetted addresses of one hop, and how to connect to one of them."""

    def __init__(self, addresses, policy: FetchPolicy, guard: FetchGuard, deadline: float, where: str):
        self.addresses = addresses
        self.policy = policy
        self.guard = guard
        self.deadline = deadline
        self.where = where

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _timeout(self.policy, self.where)
        return min(left, self.policy.timeout_s)

    def connect(self, port: int) -> socket.socket:
        failure: OSError | None = None
        for address in self.addresses:
            try:
                sock = socket.create_connection((str(address), port), timeout=self.remaining())
            except OSError as exc:
                failure = exc
                continue
            self.guard.watch(sock)
            peer = parse_address(sock.getpeername()[0])
            if peer != address or (not self.policy.allow_private and not is_public(peer)):
                sock.close()
                raise MediaError(f"{self.where}: the media URL's connection reached a non-public address; "
                                 f"{_PRIVATE_HINT}", "media_url_refused")
            return sock
        raise failure or OSError("no address to connect to")


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, pin: _Pin):
        super().__init__(host, port, timeout=pin.remaining())
        self._pin = pin

    def connect(self) -> None:
        self.sock = self._pin.connect(self.port)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, pin: _Pin):
        super().__init__(host, port, timeout=pin.remaining(), context=_tls())
        self._pin = pin

    def connect(self) -> None:
        sock = self._pin.connect(self.port)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)
        self._pin.guard.watch(self.sock)


def _tls() -> ssl.SSLContext:
    global _tls_context
    if _tls_context is None:
        _tls_context = ssl.create_default_context()
    return _tls_context
