"""Video to frames with PyAV: up to `max_frames` frames sampled at `fps` (spread evenly
over the clip when it holds more), each an RGB8 image checked against the pixel cap
before it is converted."""

from __future__ import annotations

import math

from mlxcel.media.images import check_pixels
from mlxcel.media.types import DecodedImage, DecodedVideo, MediaError, image_of, video_of

# demuxers a video part may use (ffmpeg's names); anything else is refused unread
CONTAINERS = {"mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "avi", "mpeg", "mpegts", "gif", "ogg"}


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
                 stop=lambda: False) -> DecodedVideo:
    """`source` is a path or a readable binary file."""
    import av

    frames: list[DecodedImage] = []
    try:
        with av.open(source, mode="r") as container:
            if container.format.name not in CONTAINERS:
                raise MediaError(f"{where}: unsupported video container {container.format.name!r}",
                                 "unsupported_media_type", 415)
            if not container.streams.video:
                raise MediaError(f"{where}: the file has no video stream", "invalid_media")
            stream = container.streams.video[0]
            check_pixels(stream.codec_context.width, stream.codec_context.height, max_pixels, where)
            times = sample_times(_duration(container, stream), fps, max_frames)
            due = 0  # the next sample time to fill
            for frame in container.decode(stream):
                if stop():
                    raise MediaError(f"{where}: decoding the video was cut short", "media_timeout")
                when = frame.time if frame.time is not None else due / fps
                if when + 1e-6 < times[due]:
                    continue
                check_pixels(frame.width, frame.height, max_pixels, where)
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
