"""Video to frames with PyAV: up to `max_frames` frames sampled at `fps` (spread evenly
over the clip when it holds more), each an RGB8 image checked against the pixel cap
before it is converted."""

from __future__ import annotations

import math

from mlxcel.media.images import check_pixels
from mlxcel.media.types import DecodedImage, DecodedVideo, MediaError, image_of, video_of


def sniff(head: bytes) -> str | None:
    """The demuxer for a clip starting with `head`, by its magic bytes; None for anything
    else. The demuxer is named, never probed: ffmpeg's playlist demuxers (HLS, concat)
    would open other files and URLs behind the access policy's back."""
    if head[4:8] == b"ftyp":
        return "mp4"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "matroska"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "avi"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "gif"
    if head[:4] == b"OggS":
        return "ogg"
    if head[:4] == b"\x00\x00\x01\xba":
        return "mpeg"
    if len(head) > 376 and head[0] == head[188] == head[376] == 0x47:
        return "mpegts"
    return None


def sample_times(duration: float | None, fps: float, max_frames: int) -> list[float]:
    """The timestamps to take frames at: every 1/fps seconds, or `max_frames` spread
    evenly (each in the middle of its share) when the clip is longer; with no known
    duration, the first `max_frames` at 1/fps."""
    if duration is None or duration <= 0:
        return [i / fps for i in range(max_frames)]
    count = max(1, math.ceil(duration * fps))
    if count <= max_frames:
        return [i / fps for i in range(count)]
    return [(i + 0.5) * duration / max_frames for i in range(max_frames)]


def decode_video(source, fps: float, max_frames: int, max_pixels: int, where: str,
                 stop=lambda: False, reserve=None) -> DecodedVideo:
    """`source` is a path or a readable, seekable binary file. `reserve(n_bytes, where)`
    is called before each sampled frame is kept (a decoded-media budget)."""
    import av

    if isinstance(source, str):
        with open(source, "rb") as file:
            head = file.read(512)
    else:
        head = source.read(512)
        source.seek(0)
    demuxer = sniff(head)
    if demuxer is None:
        raise MediaError(f"{where}: unsupported video format (MP4/MOV, WebM/MKV, AVI, MPEG, GIF or Ogg expected)",
                         "unsupported_media_type", 415)
    frames: list[DecodedImage] = []
    try:
        with av.open(source, mode="r", format=demuxer) as container:
            if not container.streams.video:
                raise MediaError(f"{where}: the file has no video stream", "invalid_media")
            stream = container.streams.video[0]
            check_pixels(stream.codec_context.width, stream.codec_context.height, max_pixels, where)
            times = sample_times(_duration(container, stream), fps, max_frames)
            due = 0  # the next sample time to fill
            origin: float | None = None  # the first frame's time (an MPEG-TS clip starts past 0)
            for frame in container.decode(stream):
                if stop():
                    raise MediaError(f"{where}: decoding the video was cut short", "media_timeout")
                when = frame.time if frame.time is not None else due / fps
                origin = when if origin is None else origin
                when -= origin
                if when + 1e-6 < times[due]:
                    continue
                check_pixels(frame.width, frame.height, max_pixels, where)
                if reserve is not None:
                    reserve(frame.width * frame.height * 3, where)
                image = frame.to_ndarray(format="rgb24")
                frames.append(image_of(image.shape[1], image.shape[0], image.tobytes()))
                while due < len(times) and times[due] <= when + 1e-6:  # a sparse clip fills several
                    due += 1
                if due == len(times):
                    break
    except av.error.FFmpegError as exc:
        raise MediaError(f"{where}: the video could not be decoded ({exc})", "invalid_media") from None
    if not frames:
        raise MediaError(f"{where}: the video has no frames", "invalid_media")
    return video_of(tuple(frames))


def _duration(container, stream) -> float | None:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return container.duration / 1_000_000
    return None
