"""Raw HTTP/1.1 exchanges, for checks on what goes over the wire (header casing)."""

from __future__ import annotations

import socket


def raw_request(host: str, port: int, method: str, path: str, headers: dict[str, str] | None = None,
                body: bytes = b"") -> tuple[int, list[tuple[str, str]], bytes]:
    """Send one request with `Connection: close`; the status, the header lines as
    sent (names in their wire casing) and the body."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    if body:
        lines.append(f"Content-Length: {len(body)}")
    payload = ("\r\n".join(lines) + "\r\n\r\n").encode() + body
    with socket.create_connection((host, port), timeout=60) as sock:
        sock.sendall(payload)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, rest = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parsed = [tuple(part.strip() for part in line.split(":", 1)) for line in header_lines]
    return int(status_line.split()[1]), parsed, rest


def ipv6_loopback() -> bool:
    if not socket.has_ipv6:
        return False
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False
