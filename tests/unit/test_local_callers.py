"""The local-acting routes' guard against DNS rebinding: on a server listening on
loopback only, a Host that is not a local name is refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from mlxcel.http.errors import APIError
from mlxcel.http.local_callers import check_local_host


def _request(host: str | None, listen: list[str]):
    headers = {} if host is None else {"host": host}
    return SimpleNamespace(headers=headers, app=SimpleNamespace(state=SimpleNamespace(
        config=SimpleNamespace(hosts=listen))))


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "localhost", "LOCALHOST:1", "ui.localhost:80", "[::1]:8080",
                                  "::1", "10.0.0.5", "box.lan", None])
def test_local_names_pass_on_loopback(host):
    check_local_host(_request(host, ["127.0.0.1", "box.lan"]), "the proxy")


@pytest.mark.parametrize("host", ["rebound.example:8080", "localhost.evil.example", "127.0.0.1.nip.io", "[evil"])
def test_other_names_are_a_403_on_loopback(host):
    with pytest.raises(APIError) as refused:
        check_local_host(_request(host, ["127.0.0.1", "/tmp/s.sock"]), "the proxy")
    assert refused.value.status == 403


def test_a_server_listening_elsewhere_is_reached_by_any_name():
    check_local_host(_request("mybox.example:8080", ["0.0.0.0"]), "the proxy")
    check_local_host(_request("mybox.example:8080", ["127.0.0.1", "192.168.1.4"]), "the proxy")
