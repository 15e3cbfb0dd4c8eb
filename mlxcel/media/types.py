"""What a content part asks for, what comes back decoded, and the one error type."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

KINDS = ("image", "audio", "video")


@dataclass(frozen=True)
class MediaRef:
    """One media content part: `url` is a data URI, an http(s):// URL, a file:// URL or a
    bare absolute path (for input_audio also bare base64); `where` names the part in
    error messages, e.g. "messages[0].content[1]"."""

    kind: str  # "image" | "audio" | "video"
    url: str
    where: str
    format: str | None = None  # input_audio's format ("wav", "mp3", ...)
    fps: float | None = None  # video_url's fps


@dataclass(frozen=True)
class DecodedImage:
    width: int
    height: int
    rgb: bytes  # width * height * 3 bytes, RGB8, row-major
    digest: bytes  # sha256 over the dimensions and the pixels


@dataclass(frozen=True, eq=False)  # compared by digest (an array has no single truth value)
class DecodedAudio:
    samples: np.ndarray  # mono float32 in [-1, 1]
    sample_rate: int
    digest: bytes  # sha256 over the rate and the samples


@dataclass(frozen=True)
class DecodedVideo:
    frames: tuple[DecodedImage, ...]  # in time order
    digest: bytes  # sha256 over the frames' digests


Decoded = DecodedImage | DecodedAudio | DecodedVideo


class MediaError(Exception):
    """A media part that cannot be used; `status` is the HTTP status the edge answers
    (400 policy, format or timeout; 413 too large; 415 unsupported format)."""

    def __init__(self, message: str, code: str = "invalid_media", status: int = 400):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status


def image_of(width: int, height: int, rgb: bytes) -> DecodedImage:
    digest = hashlib.sha256(b"image %d %d\n" % (width, height))
    digest.update(rgb)
    return DecodedImage(width, height, rgb, digest.digest())


def audio_of(samples: np.ndarray, sample_rate: int) -> DecodedAudio:
    samples = np.ascontiguousarray(samples, dtype=np.float32)
    digest = hashlib.sha256(b"audio %d\n" % sample_rate)
    digest.update(samples.tobytes())
    return DecodedAudio(samples, sample_rate, digest.digest())


def video_of(frames: tuple[DecodedImage, ...]) -> DecodedVideo:
    digest = hashlib.sha256(b"video %d\n" % len(frames))
    for frame in frames:
        digest.update(frame.digest)
    return DecodedVideo(frames, digest.digest())
