"""The listening sockets for --host: one per address, as llama-server opens them.
An address ending in .sock is a UNIX socket path; with several TCP addresses an IPv6
one binds IPv6 only, so `::` does not also claim 0.0.0.0."""

from __future__ import annotations

import os
import socket
import stat


class ListenError(Exception):
    """An address that cannot be listened on; printed as one line."""


def _stale_socket(path: str) -> bool:
    """Whether `path` is a socket nothing listens on (left by an earlier run): only that
    is removed; a live server's socket or any other file stops the start."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            return True
        except OSError:
            return False
    return False


def _unix_socket(path: str) -> socket.socket:
    if os.path.lexists(path):
        if not _stale_socket(path):
            raise ListenError(f"cannot listen on {path}: it exists and is not a stale socket (another server's, "
                              "or not a socket)")
        try:
            os.unlink(path)  # a stale socket from an earlier run
        except OSError as exc:
            raise ListenError(f"cannot listen on {path}: {exc.strerror}") from None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {path}: {exc.strerror}") from None
    return sock


def _tcp_socket(host: str, port: int, v6only: bool, reuse_port: bool = False) -> socket.socket:
    address = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise ListenError(f"cannot listen on {host}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # --reuse-port: processes listening alike share the port's connections
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6 and v6only:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(sockaddr)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {host} port {port}: {exc.strerror}") from None
    return sock


def open_listeners(hosts: list[str], port: int, reuse_port: bool = False) -> list[socket.socket]:
    n_tcp = sum(1 for host in hosts if not host.endswith(".sock"))
    sockets: list[socket.socket] = []
    try:
        for host in hosts:
            if host.endswith(".sock"):
                sockets.append(_unix_socket(host))
            else:
                sockets.append(_tcp_socket(host, port, v6only=n_tcp > 1, reuse_port=reuse_port))
            # left non-inheritable (Python's default): uvloop's spawn closes no descriptor, so a child
            # (a command POST /tools runs, left running) would keep the port after the server ends
            sockets[-1].listen(2048)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def describe(sock: socket.socket, tls: bool = False) -> str:
    if sock.family == socket.AF_UNIX:
        return f"unix:{sock.getsockname()}" + (" (TLS)" if tls else "")
    host, port = sock.getsockname()[:2]
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"{scheme}://{host}:{port}"
