"""HTTPS with llama-server's --ssl-key-file / --ssl-cert-file: a client that trusts the
certificate gets every route, streams included; plain HTTP to the port and a client
that does not trust it fail alone, and the server goes on serving."""

from __future__ import annotations

import json
import ssl
import time

import httpx
import pytest
import trustme

from tests.server_process import ServerProcess


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    key_file, cert_file, ca_file = folder / "key.pem", folder / "cert.pem", folder / "ca.pem"
    issued.private_key_pem.write_to_path(str(key_file))
    issued.cert_chain_pems[0].write_to_path(str(cert_file))
    ca.cert_pem.write_to_path(str(ca_file))
    server = ServerProcess("-c", "1024", "-np", "1", "--ssl-key-file", str(key_file), "--ssl-cert-file",
                           str(cert_file))
    server.base_url = f"https://127.0.0.1:{server.port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if server.process.poll() is not None:
                raise RuntimeError(f"server exited:\n{server.log()}")
            try:
                if httpx.get(f"{server.base_url}/health", verify=ssl.create_default_context(cafile=str(ca_file)), timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)
        yield server, ssl.create_default_context(cafile=str(ca_file))
    finally:
        server.stop()


def test_a_client_that_trusts_the_certificate_gets_answers_and_streams(tls_server):
    server, ca_file = tls_server
    with httpx.Client(base_url=server.base_url, verify=ca_file, timeout=60) as client:
        answer = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0})
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] >= 1
        with client.stream("POST", "/completion", json={"prompt": "One, two,", "n_predict": 4, "stream": True}) \
                as stream:
            events = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: ")]
        assert events[-1]["stop"] is True and sum(1 for e in events if e.get("content")) >= 1
    assert f"https://127.0.0.1:{server.port}" in server.log()


def test_plain_http_and_untrusting_clients_fail_alone(tls_server):
    server, ca_file = tls_server
    with pytest.raises(httpx.HTTPError):  # no TLS handshake: the server drops the connection
        httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=10)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):  # the client's own check
        httpx.get(f"{server.base_url}/health", timeout=10)
    assert httpx.get(f"{server.base_url}/health", verify=ca_file, timeout=10).status_code == 200
    assert "Traceback" not in server.log()
