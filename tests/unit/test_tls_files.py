"""--ssl-key-file / --ssl-cert-file are checked when the command line is read."""

from __future__ import annotations

import pytest
import trustme

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.cli.usage import UsageError


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pair")
    ca = trustme.CA()
    first, second = ca.issue_cert("127.0.0.1"), ca.issue_cert("localhost")
    paths = {name: str(folder / f"{name}.pem") for name in ("key", "cert", "other_key")}
    first.private_key_pem.write_to_path(paths["key"])
    first.cert_chain_pems[0].write_to_path(paths["cert"])
    second.private_key_pem.write_to_path(paths["other_key"])
    (folder / "garbage.pem").write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    paths["garbage"] = str(folder / "garbage.pem")
    return paths


def test_a_matching_pair_serves_https(pair):
    config = parse_serve_args(["--ssl-key-file", pair["key"], "--ssl-cert-file", pair["cert"]])
    assert (config.tls.key_file, config.tls.cert_file) == (pair["key"], pair["cert"])
    assert config.ignored_flags == []
    assert parse_serve_args([]).tls is None


@pytest.mark.parametrize("argv, message", [
    (["--ssl-key-file", "{key}"], "go together"),
    (["--ssl-cert-file", "{cert}"], "go together"),
    (["--ssl-key-file", "/nonexistent/key.pem", "--ssl-cert-file", "{cert}"], "no such file"),
    (["--ssl-key-file", "{other_key}", "--ssl-cert-file", "{cert}"], "cannot serve TLS"),
    (["--ssl-key-file", "{key}", "--ssl-cert-file", "{garbage}"], "cannot serve TLS"),
])
def test_a_bad_pair_fails_the_start_in_one_line(pair, argv, message):
    with pytest.raises(UsageError, match=message) as caught:
        parse_serve_args([arg.format(**pair) for arg in argv])
    assert "\n" not in str(caught.value)
