"""Fuzzing media parts on a server with a projector: content arrays of images, audio
and video parts whose sources are valid, truncated, mislabelled, hostile or absurd,
in every API's shape, streamed and whole. Whatever comes: no 5xx, every error in the
spec's shape, no hang, and the server healthy and serving afterwards.

Derandomized, so CI replays the same bodies every run."""

from __future__ import annotations

import base64
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.fuzz_client import checked_problems
from tests.projector_gguf import png_bytes, write_vision_projector
from tests.server_process import ServerProcess
from tests.unit.media_samples import gif_bytes, image_bytes, png_header, tone, wav_bytes

PNG = png_bytes(24, 16)
PAYLOADS = [PNG, PNG[: len(PNG) // 2], gif_bytes(), image_bytes("JPEG"), image_bytes("WEBP"), png_header(70_000, 70_000),
            wav_bytes(tone(8000, 0.2), 8000), b"", b"\x00" * 64, b"GIF89a", b"RIFF\xff\xff\xff\xffWAVE"]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


sources = st.one_of(
    st.sampled_from(PAYLOADS).map(lambda d: f"data:image/png;base64,{_b64(d)}"),
    st.tuples(st.sampled_from(["image/png", "image/jpeg", "audio/wav", "video/mp4", "text/html", "", "image/../x"]),
              st.sampled_from(PAYLOADS)).map(lambda p: f"data:{p[0]};base64,{_b64(p[1])}"),
    st.sampled_from(["data:image/png;base64,", "data:,", "data:image/png,rawtext", "data:image/png;base64,@@@",
                     "http://127.0.0.1:1/x.png", "http://[::1]/x.png", "http://169.254.169.254/latest",
                     "https://localhost./a.png", "file:///etc/passwd", "file://../../etc/passwd", "/dev/zero",
                     "/proc/self/environ", "relative/path.png", "ftp://x/y", "gopher://x", "javascript:alert(1)",
                     "http://", "x" * 3000, "data:image/png;base64," + "A" * 10_001]),
    st.text(max_size=40),
)
media_parts = st.one_of(
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, sources),
    st.builds(lambda u: {"type": "image_url", "image_url": u}, sources),
    st.builds(lambda u, f: {"type": "input_audio", "input_audio": {"data": u, "format": f}}, sources,
              st.sampled_from(["wav", "mp3", "", "exe"])),
    st.builds(lambda u, fps: {"type": "video_url", "video_url": {"url": u, "fps": fps}}, sources,
              st.one_of(st.none(), st.floats(-5, 1e6, allow_nan=False), st.integers(-3, 10**9), st.just("2"))),
    st.builds(lambda v: {"type": "image_url", "image_url": v},
              st.one_of(st.none(), st.integers(), st.lists(st.text(max_size=3), max_size=2), st.just({"url": None}))),
)
contents = st.lists(st.one_of(media_parts, st.just({"type": "text", "text": "Look."})), min_size=1, max_size=4)


def _chat(parts, stream: bool) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": parts}], "max_tokens": 2, "stream": stream}).encode()


def _anthropic(parts, stream: bool) -> bytes:
    blocks = []
    for part in parts:
        if part["type"] == "image_url" and isinstance(part["image_url"], dict):
            url = part["image_url"].get("url")
            source = ({"type": "base64", "media_type": "image/png", "data": url.split(",", 1)[-1]}
                      if isinstance(url, str) and url.startswith("data:") else {"type": "url", "url": url})
            blocks.append({"type": "image", "source": source})
        elif part["type"] == "text":
            blocks.append(part)
    blocks = blocks or [{"type": "text", "text": "Look."}]
    return json.dumps({"model": "m", "max_tokens": 2, "stream": stream,
                       "messages": [{"role": "user", "content": blocks}]}).encode()


def _responses(parts, stream: bool) -> bytes:
    items = [{"type": "input_image", "image_url": p["image_url"].get("url") if isinstance(p["image_url"], dict)
              else p["image_url"]} if p["type"] == "image_url" else
             ({"type": "input_text", "text": p["text"]} if p["type"] == "text" else p) for p in parts]
    return json.dumps({"model": "m", "input": [{"role": "user", "content": items}], "max_output_tokens": 2,
                       "stream": stream, "store": False}).encode()


SCALE = float(os.environ.get("MLXCEL_FUZZ_SCALE", "1"))  # as in test_fuzz.py: a deeper local hunt
ROUTES = [("/v1/chat/completions", _chat), ("/v1/messages", _anthropic), ("/v1/responses", _responses)]


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    projector = tmp_path_factory.mktemp("projector") / "vision-mmproj.gguf"
    write_vision_projector(projector)
    proc = ServerProcess("-c", "2048", "-np", "2", "--mmproj", str(projector), "--media-fetch-timeout", "2",
                         "--media-load-timeout", "5")
    try:
        with proc.wait_ready().client(timeout=120) as http:
            yield http
    finally:
        proc.stop()


@pytest.mark.parametrize("path, shape", ROUTES, ids=[r[0] for r in ROUTES])
def test_fuzzed_media_parts_never_break_the_server(client, path, shape):
    @settings(max_examples=round(45 * SCALE), deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(parts=contents, stream=st.booleans())
    def fuzz(parts, stream):
        raw = shape(parts, stream)
        found = checked_problems(client, path, raw)
        assert not found, "\n".join(found) + f"\nbody sent: {raw[:2000]!r}"

    fuzz()
    assert client.get("/health").status_code == 200


def test_healthy_and_serving_media_after_the_fuzzing(client):
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": f"data:image/png;base64,{_b64(PNG)}"}}]}], "max_tokens": 2}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
