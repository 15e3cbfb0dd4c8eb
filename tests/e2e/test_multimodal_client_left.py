"""A client that leaves while its media is still loading stops the load: the fetch is
cut (its connection to the media host closed) long before the fetch timeout, not run
to the end for nobody, and the server serves the next request."""

from __future__ import annotations

import base64
import json
import socket
import threading

import httpx
import pytest

from tests.projector_gguf import png_bytes, write_vision_projector
from tests.server_process import ServerProcess

FETCH_TIMEOUT_S = 120  # what an abandoned fetch would hold its connection and worker for


class SilentMediaHost:
    """An HTTP host that takes each request and never answers; `closed` is set when
    the server's connection to it closes."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/photo.png"
        self.connected = threading.Event()
        self.closed = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connected.set()
            threading.Thread(target=self._hold, args=(conn, self.closed), daemon=True).start()

    @staticmethod
    def _hold(conn: socket.socket, closed: threading.Event) -> None:
        with conn:
            while conn.recv(4096):
                pass
        closed.set()

    def reset(self) -> None:
        """Fresh events for the next request (a connection held from an earlier one sets
        only its own)."""
        self.connected = threading.Event()
        self.closed = threading.Event()


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    projector = tmp_path_factory.mktemp("projector") / "vision-mmproj.gguf"
    write_vision_projector(projector)
    proc = ServerProcess("-c", "1024", "-np", "1", "--mmproj", str(projector),
                         "--media-fetch-timeout", str(FETCH_TIMEOUT_S),
                         env={"MLXCEL_ALLOW_PRIVATE_MEDIA_URLS": "1"})
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def media_host():
    host = SilentMediaHost()
    yield host
    host.listener.close()


def _chat(url: str) -> tuple[str, dict]:
    content = [{"type": "text", "text": "Describe this."}, {"type": "image_url", "image_url": {"url": url}}]
    return "/v1/chat/completions", {"messages": [{"role": "user", "content": content}], "max_tokens": 2}


def _messages(url: str) -> tuple[str, dict]:
    return "/v1/messages", {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": url}}]}]}


def _completion(url: str) -> tuple[str, dict]:
    return "/completion", {"prompt": {"prompt_string": "Look: <__media__>", "multimodal_data": [url]}, "n_predict": 2}


@pytest.mark.parametrize("shape", [_chat, _messages, _completion])
@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_during_the_media_load_stops_it(vision, media_host, shape, stream):
    media_host.reset()
    path, body = shape(media_host.url)
    if path == "/completion":
        marker = httpx.get(f"{vision.base_url}/props").json()["media_marker"]
        body["prompt"]["prompt_string"] = f"Look: {marker}"
    leaving = threading.Thread(target=_post_and_leave, args=(vision.base_url + path, {**body, "stream": stream},
                                                             media_host.connected))
    leaving.start()
    leaving.join(60)
    assert media_host.connected.is_set(), "the media fetch never started"
    assert media_host.closed.wait(30), f"the fetch outlived its client (it runs on to the {FETCH_TIMEOUT_S} s timeout)"
    with vision.client(timeout=60) as client:
        answer = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(
                png_bytes(12, 12)).decode()}}]}], "max_tokens": 2})
        assert answer.status_code == 200, answer.text


def _post_and_leave(url: str, body: dict, fetching: threading.Event) -> None:
    """Send the request, wait until the server is fetching its media, then disconnect."""
    parts = httpx.URL(url)
    payload = json.dumps(body).encode()
    with socket.create_connection((parts.host, parts.port)) as sock:
        sock.sendall(f"POST {parts.raw_path.decode()} HTTP/1.1\r\nHost: {parts.host}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
        fetching.wait(30)
