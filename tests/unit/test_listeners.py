from __future__ import annotations

import socket

import pytest

from mlxcel.server.listeners import ListenError, describe, open_listeners


def test_tcp_and_unix_listeners(tmp_path):
    path = str(tmp_path / "mlxcel.sock")
    sockets = open_listeners(["127.0.0.1", path], 0)
    try:
        assert [s.family for s in sockets] == [socket.AF_INET, socket.AF_UNIX]
        assert describe(sockets[0]).startswith("http://127.0.0.1:") and describe(sockets[1]) == f"unix:{path}"
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(path)  # listening
    finally:
        for sock in sockets:
            sock.close()


def test_a_unix_path_in_use_or_not_a_socket_is_left_alone(tmp_path):
    taken, stale, kept = (str(tmp_path / name) for name in ("live.sock", "stale.sock", "file.sock"))
    first = open_listeners([taken], 0)
    with socket.socket(socket.AF_UNIX) as old:  # bound, never listening: a socket left by a run that ended
        old.bind(stale)
    (tmp_path / "file.sock").write_text("data")
    try:
        with pytest.raises(ListenError, match="live.sock: it exists"):
            open_listeners([taken], 0)
        with pytest.raises(ListenError, match="file.sock: it exists"):
            open_listeners([kept], 0)
        assert (tmp_path / "file.sock").read_text() == "data"
        for sock in open_listeners([stale], 0):  # a stale one is replaced
            sock.close()
    finally:
        first[0].close()


def test_an_address_in_use_is_one_line():
    first = open_listeners(["127.0.0.1"], 0)
    port = first[0].getsockname()[1]
    try:
        with pytest.raises(ListenError, match=f"cannot listen on 127.0.0.1 port {port}"):
            open_listeners(["127.0.0.1"], port)
    finally:
        first[0].close()


def test_reuse_port_lets_two_listeners_share_a_port_and_only_then():
    first = open_listeners(["127.0.0.1"], 0, reuse_port=True)
    port = first[0].getsockname()[1]
    try:
        second = open_listeners(["127.0.0.1"], port, reuse_port=True)
        for sock in second:
            sock.close()
        with pytest.raises(ListenError):
            open_listeners(["127.0.0.1"], port)
    finally:
        for sock in first:
            sock.close()

