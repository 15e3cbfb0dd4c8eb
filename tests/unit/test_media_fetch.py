"""Remote media against a real HTTP(S) server on 127.0.0.1 started here: the address
policy before connecting, after each redirect and for the connected peer; the pinned
connection (Host header, TLS name); byte caps, deadlines and redirect limits."""

from __future__ import annotations

import asyncio
import http.server
import os
import shutil
import ssl
import subprocess
import threading
import time
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import pytest

import mlxcel.media.fetch as fetch_module
from mlxcel.config import MediaSettings
from mlxcel.media import DecodedImage, DecodedVideo, MediaError, MediaLoader, MediaRef
from mlxcel.media.addresses import is_public
from mlxcel.media.fetch import FetchGuard, FetchPolicy, fetch
from tests.unit.media_samples import image_bytes, video_bytes

PNG = image_bytes("PNG")
PRIVATE = MediaSettings(allow_private_urls=True)


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.server.seen.append((url.path, self.headers.get("Host")))
        route = getattr(self, "route_" + url.path.strip("/").replace("-", "_").replace(".", "_"), None)
        if route is None:
            self.send_error(404)
            return
        try:
            route(query)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def send_body(self, body: bytes, kind: str = "image/png", length: bool = True):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def route_image_png(self, query):
        started = time.monotonic()
        time.sleep(float(query.get("delay", 0)))
        self.server.spans.append((started, time.monotonic()))
        self.send_body(PNG)

    def route_clip_mp4(self, query):
        self.send_body(self.server.clip, "video/mp4")

    def route_redirect(self, query):
        self.send_response(int(query.get("code", 302)))
        self.send_header("Location", query["to"])
        self.send_header("Content-Length", "0")
        self.end_headers()

    def route_loop(self, query):
        self.route_redirect({"to": "/loop"})

    def route_big(self, query):  # with Content-Length, or (HTTP/1.0) delimited by closing
        size = int(query["size"])
        self.send_body(b"\0" * size, length=query.get("length") == "1")

    def route_stall(self, query):  # headers, then nothing
        self.send_response(200)
        self.send_header("Content-Length", "1000")
        self.end_headers()
        self.wfile.flush()
        time.sleep(float(query.get("for", 10)))

    def route_trickle(self, query):  # a byte every 100 ms: each read is quick, the whole is not
        self.send_response(200)
        self.end_headers()
        for _ in range(200):
            self.wfile.write(b"x")
            self.wfile.flush()
            time.sleep(0.1)


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.seen = []
    httpd.spans = []
    httpd.clip = video_bytes(seconds=1.0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def base(server):
    server.seen.clear()
    server.spans.clear()
    return f"http://127.0.0.1:{server.server_address[1]}"


def resolver_to(mapping: dict[str, str]):
    def resolve(host, port):
        if host not in mapping:
            raise OSError(f"unknown host {host}")
        return [(2, 1, 6, "", (mapping[host], port))]

    return resolve


def load(settings: MediaSettings, *refs: MediaRef, resolver=None):
    return asyncio.run(MediaLoader(settings, resolver=resolver).load(list(refs), 16000))


def refused(settings, url, status=400, resolver=None, kind="image", where="messages[0].content[1]") -> MediaError:
    with pytest.raises(MediaError) as caught:
        load(settings, MediaRef(kind, url, where), resolver=resolver)
    assert caught.value.status == status and where in caught.value.message
    return caught.value


def test_loopback_is_refused_before_connecting(server, base):
    error = refused(MediaSettings(), f"{base}/image.png")
    assert "non-public" in error.message and "MLXCEL_ALLOW_PRIVATE_MEDIA_URLS" in error.message
    refused(MediaSettings(), f"http://[::ffff:127.0.0.1]:{server.server_address[1]}/image.png")
    refused(MediaSettings(), f"http://localhost:{server.server_address[1]}/image.png")
    assert server.seen == []


def test_loopback_is_fetched_when_private_urls_are_allowed(server, base):
    (image,) = load(PRIVATE, MediaRef("image", f"{base}/image.png", "p"))
    assert isinstance(image, DecodedImage) and (image.width, image.height) == (7, 5)
    assert server.seen == [("/image.png", f"127.0.0.1:{server.server_address[1]}")]


def test_a_public_looking_name_resolving_to_loopback_is_refused(server, base):
    port = server.server_address[1]
    resolver = resolver_to({"media.example.com": "127.0.0.1"})
    refused(MediaSettings(), f"http://media.example.com:{port}/image.png", resolver=resolver)
    assert server.seen == []
    # allowed: fetched through the address resolved once, with the URL's host in Host
    (image,) = load(PRIVATE, MediaRef("image", f"http://media.example.com:{port}/image.png", "p"), resolver=resolver)
    assert image.width == 7 and server.seen == [("/image.png", f"media.example.com:{port}")]


def test_a_name_with_any_private_address_is_refused(server, base):
    def resolver(host, port):
        return [(2, 1, 6, "", ("93.184.216.34", port)), (2, 1, 6, "", ("10.0.0.1", port))]

    refused(MediaSettings(), "http://mixed.example.com/image.png", resolver=resolver)


@pytest.fixture
def loopback_counts_as_public(monkeypatch):
    """127.0.0.1 stands in for a public server (nothing public is reachable from a test)."""
    monkeypatch.setattr(fetch_module, "is_public", lambda address: str(address) == "127.0.0.1" or is_public(address))


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/x.png",
                                    "http://[::1]:1/x.png", "http://internal.example.com/x.png",
                                    "file:///etc/passwd"])
def test_a_redirect_to_a_private_address_is_refused(server, base, loopback_counts_as_public, target):
    port = server.server_address[1]
    resolver = resolver_to({"cdn.example.com": "127.0.0.1", "internal.example.com": "192.168.0.10"})
    for code in (301, 302, 307):
        url = f"http://cdn.example.com:{port}/redirect?code={code}&to={target}"
        error = refused(MediaSettings(), url, resolver=resolver)
        assert "non-public" in error.message or "non-http(s)" in error.message
    assert [path for path, _ in server.seen] == ["/redirect"] * 3


def test_a_redirect_to_a_public_address_is_followed(server, base, loopback_counts_as_public):
    port = server.server_address[1]
    resolver = resolver_to({"cdn.example.com": "127.0.0.1", "img.example.com": "127.0.0.1"})
    url = f"http://cdn.example.com:{port}/redirect?to=http://img.example.com:{port}/image.png"
    (image,) = load(MediaSettings(), MediaRef("image", url, "p"), resolver=resolver)
    assert image.width == 7
    assert server.seen == [("/redirect", f"cdn.example.com:{port}"), ("/image.png", f"img.example.com:{port}")]


def test_the_connected_peer_is_checked_again(server, base, monkeypatch):
    verdicts = iter([True])  # public when vetted, then the peer check says otherwise

    monkeypatch.setattr(fetch_module, "is_public", lambda address: next(verdicts, False))
    error = refused(MediaSettings(), f"{base}/image.png")
    assert "connection reached a non-public address" in error.message
    assert server.seen == []


def test_too_many_redirects_are_refused(server, base):
    error = refused(replace(PRIVATE, max_redirects=3), f"{base}/loop")
    assert "more than 3" in error.message
    assert [path for path, _ in server.seen] == ["/loop"] * 4


@pytest.mark.parametrize("length", ["1", "0"])
def test_oversized_bodies_are_refused(server, base, length):
    settings = replace(PRIVATE, max_bytes=1000)
    refused(settings, f"{base}/big?size=1001&length={length}", 413)
    refused(settings, f"{base}/big?size=5000000&length={length}", 413)
    refused(replace(PRIVATE, max_video_bytes=1000), f"{base}/big?size=2000&length={length}", 413, kind="video")


def test_an_error_status_is_a_400(server, base):
    error = refused(PRIVATE, f"{base}/missing.png")
    assert "HTTP 404" in error.message


@pytest.mark.parametrize("route", ["stall", "trickle"])
def test_a_slow_server_times_out_within_the_timeout(server, base, route):
    settings = replace(PRIVATE, fetch_timeout_s=1.0)
    started = time.monotonic()
    error = refused(settings, f"{base}/{route}")
    assert error.code == "media_timeout" and "1 s" in error.message
    assert time.monotonic() - started < 2.5  # the server stalls for 10 s, trickles for 20 s
    # the fetch itself, in a thread of its own: it is over by the deadline, not left reading
    policy = FetchPolicy(allow_private=True, max_redirects=0, timeout_s=0.5)
    thread = threading.Thread(target=lambda: pytest.raises(MediaError, fetch, f"{base}/{route}", 10_000, policy,
                                                           FetchGuard(), lambda chunk: None, "p"), daemon=True)
    thread.start()
    thread.join(2.0)
    assert not thread.is_alive()


def test_the_whole_load_is_bounded_and_leaves_no_worker_behind(server, base):
    loader = MediaLoader(replace(PRIVATE, fetch_timeout_s=30.0, load_timeout_s=0.5))
    started = time.monotonic()
    with pytest.raises(MediaError, match="longer than 0.5 s") as caught:
        asyncio.run(loader.load([MediaRef("image", f"{base}/stall?for=20", "p")], 16000))
    assert caught.value.code == "media_timeout" and time.monotonic() - started < 2.0
    closer = threading.Thread(target=loader._executor.shutdown, kwargs={"wait": True}, daemon=True)
    closer.start()
    closer.join(2.0)
    assert not closer.is_alive(), "a media worker is still reading after the load gave up"


def test_parts_are_fetched_concurrently_and_a_failure_stops_the_rest(server, base):
    refs = [MediaRef("image", f"{base}/image.png?delay=0.5", f"p{i}") for i in range(3)]
    assert len(load(PRIVATE, *refs)) == 3
    assert max(start for start, _ in server.spans) < min(end for _, end in server.spans)  # all three at once
    started = time.monotonic()
    refs = [MediaRef("image", f"{base}/stall?for=20", "slow"), MediaRef("image", f"{base}/missing.png", "bad")]
    with pytest.raises(MediaError, match="^bad: .*HTTP 404"):
        load(replace(PRIVATE, fetch_timeout_s=30.0), *refs)
    assert time.monotonic() - started < 3.0  # the stalled part (20 s) was cut short


def test_remote_video_is_downloaded_to_a_private_file_and_removed(server, base, tmp_path):
    (video,) = load(replace(PRIVATE, temp_dir=str(tmp_path)), MediaRef("video", f"{base}/clip.mp4", "p"))
    assert isinstance(video, DecodedVideo) and len(video.frames) == 4
    assert os.listdir(tmp_path) == []


# -- TLS: the connection goes to the pinned address, the certificate is checked for the URL's host


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=media.example.com",
                    "-addext", "subjectAltName=DNS:media.example.com"], check=True, capture_output=True)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    httpd.seen, httpd.spans = [], []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd, ssl.create_default_context(cafile=str(cert))
    httpd.shutdown()
    httpd.server_close()


def test_https_is_pinned_with_the_hostname_checked(tls_server, monkeypatch):
    httpd, client_context = tls_server
    monkeypatch.setattr(fetch_module, "_tls_context", client_context)
    port = httpd.server_address[1]
    resolver = resolver_to({"media.example.com": "127.0.0.1", "other.example.com": "127.0.0.1"})
    (image,) = load(PRIVATE, MediaRef("image", f"https://media.example.com:{port}/image.png", "p"), resolver=resolver)
    assert image.width == 7 and httpd.seen[-1] == ("/image.png", f"media.example.com:{port}")
    error = refused(PRIVATE, f"https://other.example.com:{port}/image.png", resolver=resolver)
    assert "certificate" in error.message.lower() or "hostname" in error.message.lower()
    refused(MediaSettings(), f"https://media.example.com:{port}/image.png", resolver=resolver)


def test_fetching_and_decoding_leave_the_event_loop_free(server, base):
    async def run():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        await MediaLoader(PRIVATE).load([MediaRef("image", f"{base}/image.png?delay=0.5", "p")], 16000)
        task.cancel()
        return ticks

    assert asyncio.run(run()) >= 10  # the loop kept turning while the part was fetched
