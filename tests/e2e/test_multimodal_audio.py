"""Audio in prompts, end to end: SmolLM2 with the tiny ultravox-style projector the
tests write (25 tokens per 30 s window, 16 kHz). Every container the issue names is
decoded and resampled to the projector's rate; the same clip costs the same tokens
whatever it was sent as; a clip is cached by content."""

from __future__ import annotations

import base64
import http.server
import threading
import time

import numpy as np
import pytest

from tests.projector_gguf import png_bytes, write_audio_projector
from tests.server_process import ServerProcess
from tests.unit.media_samples import encoded_audio, tone, wav_bytes

WINDOW_TOKENS = 25


@pytest.fixture(scope="module")
def audio(tmp_path_factory):
    """With MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1: remote media may come from loopback (the
    vision tests' server runs without it and refuses loopback)."""
    projector = tmp_path_factory.mktemp("projector") / "audio-mmproj.gguf"
    write_audio_projector(projector)
    proc = ServerProcess("-c", "2048", "-np", "2", "--metrics", "--mmproj", str(projector),
                         "--media-fetch-timeout", "2", env={"MLXCEL_ALLOW_PRIVATE_MEDIA_URLS": "1"})
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


@pytest.fixture
def client(audio):
    with audio.client(timeout=120) as http:
        yield http


def audio_part(data: bytes, fmt: str) -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def prompt_tokens(client, content) -> int:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 3, "temperature": 0}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()["usage"]["prompt_tokens"]


def test_the_modalities_are_audio_only(client):
    assert client.get("/props").json()["modalities"] == {"vision": False, "video": False, "audio": True}


@pytest.mark.parametrize("fmt, data", [
    ("wav", wav_bytes(tone(44100, 1.0), 44100)),
    ("wav", wav_bytes(tone(8000, 1.0, channels=2), 8000, bits=8)),
    ("mp3", encoded_audio("mp3", "libmp3lame")),
    ("flac", encoded_audio("flac", "flac")),
    ("ogg", encoded_audio("ogg", "libopus", rate=48000)),
])
def test_every_container_becomes_one_window_of_tokens(client, fmt, data):
    n_text = prompt_tokens(client, "Listen.")
    assert prompt_tokens(client, [{"type": "text", "text": "Listen."}, audio_part(data, fmt)]) == n_text + WINDOW_TOKENS


def test_a_long_clip_takes_a_window_per_30_seconds_and_is_cached_by_content(client):
    clip = audio_part(wav_bytes(0.2 * np.sin(np.linspace(0, 9000, 16000 * 35))[:, None], 16000), "wav")
    body = {"messages": [{"role": "user", "content": [clip]}], "max_tokens": 3, "temperature": 0}
    first = client.post("/v1/chat/completions", json=body).json()
    second = client.post("/v1/chat/completions", json=body).json()
    assert first["usage"]["prompt_tokens"] == prompt_tokens(client, "") + 2 * WINDOW_TOKENS
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"] - 1
    assert second["choices"] == first["choices"]


def test_responses_input_audio(client):
    part = audio_part(wav_bytes(tone(16000, 0.5), 16000), "wav")
    body = {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hear this."}, part]}],
            "max_output_tokens": 3, "temperature": 0, "store": False}
    response = client.post("/v1/responses", json=body)
    assert response.status_code == 200, response.text
    text_only = client.post("/v1/responses", json={**body, "input": "Hear this."}).json()
    assert response.json()["usage"]["input_tokens"] == text_only["usage"]["input_tokens"] + WINDOW_TOKENS


def test_an_image_on_an_audio_only_projector_is_a_400(client):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png_bytes(8, 8)).decode()}}
    body = {"messages": [{"role": "user", "content": [image]}], "max_tokens": 3}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "unsupported_content_type"


def test_a_corrupt_clip_fails_alone(client):
    body = {"messages": [{"role": "user", "content": [audio_part(b"RIFF\x00\x00\x00\x00WAVEjunk", "wav")]}],
            "max_tokens": 3}
    response = client.post("/v1/chat/completions", json=body)
    assert 400 <= response.status_code < 500, response.text
    assert prompt_tokens(client, "Still fine?") > 0


@pytest.fixture
def clip_server():
    """A real HTTP server on loopback serving one WAV clip at /clip.wav."""
    clip = wav_bytes(tone(16000, 0.5), 16000)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            if self.path == "/slow.wav":  # headers, then a body that never comes
                self.send_response(200)
                self.send_header("Content-Length", str(len(clip)))
                self.end_headers()
                self.wfile.write(clip[:100])
                self.wfile.flush()
                time.sleep(6)
                return
            found = self.path == "/clip.wav"
            self.send_response(200 if found else 404)
            self.send_header("Content-Length", str(len(clip) if found else 0))
            self.end_headers()
            if found:
                self.wfile.write(clip)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_loopback_url_is_fetched_when_private_addresses_are_allowed(client, clip_server):
    part = {"type": "input_audio", "input_audio": {"url": f"{clip_server}/clip.wav", "format": "wav"}}
    assert prompt_tokens(client, [part]) == prompt_tokens(client, "") + WINDOW_TOKENS
    missing = {"type": "input_audio", "input_audio": {"url": f"{clip_server}/none.wav", "format": "wav"}}
    body = {"messages": [{"role": "user", "content": [missing]}], "max_tokens": 3}
    assert client.post("/v1/chat/completions", json=body).status_code == 400


def test_a_slow_media_server_times_out_cleanly(client, clip_server):
    slow = {"type": "input_audio", "input_audio": {"url": f"{clip_server}/slow.wav", "format": "wav"}}
    response = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": [slow]}],
                                                         "max_tokens": 3})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "media_timeout"
    assert prompt_tokens(client, "Still serving?") > 0


def test_media_memory_bounds_what_one_request_may_decode(tmp_path):
    """--media-memory 1 (MiB): a clip decoded to more than that is a 413, smaller ones pass."""
    projector = tmp_path / "audio-mmproj.gguf"
    write_audio_projector(projector)
    proc = ServerProcess("-c", "1024", "-np", "1", "--mmproj", str(projector), "--media-memory", "1")
    try:
        with proc.wait_ready().client(timeout=120) as small:
            big = audio_part(wav_bytes(tone(16000, 20.0), 16000), "wav")  # 20 s: 1.2 MiB of float32 samples
            body = {"messages": [{"role": "user", "content": [big]}], "max_tokens": 2}
            response = small.post("/v1/chat/completions", json=body)
            assert response.status_code == 413, response.text
            assert "--media-memory" in response.json()["error"]["message"]
            assert prompt_tokens(small, [audio_part(wav_bytes(tone(16000, 2.0), 16000), "wav")]) > WINDOW_TOKENS
    finally:
        proc.stop()
