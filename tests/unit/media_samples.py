"""Small real media files for the media tests, made with Pillow and PyAV."""

from __future__ import annotations

import io
import struct

import numpy as np
from PIL import Image


def image_bytes(fmt: str, size=(7, 5), colour=(200, 30, 40)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, colour).save(buffer, format=fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    return buffer.getvalue()


def gif_bytes() -> bytes:
    """Two frames: red then blue; the first is the one decoded."""
    frames = [Image.new("RGB", (4, 3), c) for c in ((255, 0, 0), (0, 0, 255))]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    return buffer.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height over a few bytes of pixel data."""
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def tone(rate: int, seconds: float, freq: float = 440.0, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    mono = 0.5 * np.sin(2 * np.pi * freq * t)
    return np.repeat(mono[:, None], channels, axis=1)


def wav_bytes(samples: np.ndarray, rate: int, bits: int = 16, float_format: bool = False) -> bytes:
    """A RIFF WAV of `samples` (frames x channels, floats in [-1, 1])."""
    channels = samples.shape[1]
    if float_format:
        data = samples.astype("<f4" if bits == 32 else "<f8").tobytes()
        tag = 3
    elif bits == 8:
        data = np.clip(samples * 127 + 128, 0, 255).astype(np.uint8).tobytes()
        tag = 1
    elif bits == 24:
        ints = np.clip(samples * (2**23 - 1), -(2**23), 2**23 - 1).astype("<i4")
        data = ints.view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
        tag = 1
    else:
        scale = 2 ** (bits - 1) - 1
        data = np.clip(samples * scale, -scale - 1, scale).astype("<i2" if bits == 16 else "<i4").tobytes()
        tag = 1
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def encoded_audio(container: str, codec: str, rate: int = 44100, seconds: float = 0.5, channels: int = 2) -> bytes:
    import av

    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout="stereo" if channels == 2 else "mono")
        samples = np.ascontiguousarray(tone(rate, seconds, channels=channels).T, dtype=np.float32)
        frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout=stream.layout.name)
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()


def video_bytes(seconds: float = 2.0, fps: int = 10, size=(32, 24), container: str = "mp4",
                codec: str = "mpeg4") -> bytes:
    """A clip whose frame i is filled with grey level 10 * i (so a frame's time can be read back)."""
    import av

    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container) as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.options = {"qscale": "1"}
        for i in range(int(seconds * fps)):
            image = np.full((size[1], size[0], 3), min(255, 10 * i), dtype=np.uint8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buffer.getvalue()
