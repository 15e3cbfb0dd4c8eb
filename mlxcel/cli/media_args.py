"""`serve` flags of media content parts (mlxcel.media): where local files may be read,
how video is sampled, and the limits on every fetch and decode. Two environment
variables complete them, read once here at start: MLXCEL_ALLOW_PRIVATE_MEDIA_URLS=1
lifts the public-address rule on remote URLs; MLXCEL_VIDEO_DIR_ALLOWLIST lists the
directories local video may come from (none: local video refused)."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping

from mlxcel.cli.arg_types import ranged
from mlxcel.config import MediaSettings

log = logging.getLogger(__name__)

ALLOW_PRIVATE_ENV = "MLXCEL_ALLOW_PRIVATE_MEDIA_URLS"
VIDEO_DIRS_ENV = "MLXCEL_VIDEO_DIR_ALLOWLIST"
MEDIA_PATH_ENV = "MLXCEL_MEDIA_PATH"
_DEFAULTS = MediaSettings()
_MIB = 1024 * 1024


class MediaUsageError(ValueError):
    pass


# (flags, dest, type, default, env, help): the shape of serve_args' value options
MEDIA_OPTIONS = [
    (("--video-max-frames",), "video_max_frames", ranged(int, 1, 1024), _DEFAULTS.video_max_frames,
     "MLXCEL_VIDEO_MAX_FRAMES", "most frames sampled from one video part (spread evenly over a longer clip)"),
    (("--video-fps",), "video_fps", ranged(float, 0.01, 1000.0), _DEFAULTS.video_fps, "LLAMA_ARG_VIDEO_FPS",
     "frames sampled per second of video when a video_url part gives no fps"),
    (("--media-max-bytes",), "media_max_bytes", ranged(int, 1024), _DEFAULTS.max_bytes, "MLXCEL_MEDIA_MAX_BYTES",
     (f"largest image or audio part, encoded, inline or fetched (default {_DEFAULTS.max_bytes // _MIB} MiB); "
      "beyond it 413")),
    (("--media-max-video-bytes",), "media_max_video_bytes", ranged(int, 1024), _DEFAULTS.max_video_bytes,
     "MLXCEL_MEDIA_MAX_VIDEO_BYTES",
     f"largest video part (default {_DEFAULTS.max_video_bytes // _MIB} MiB); beyond it 413"),
    (("--media-fetch-timeout",), "media_fetch_timeout", ranged(float, 0.1, 3600.0), _DEFAULTS.fetch_timeout_s,
     "MLXCEL_MEDIA_FETCH_TIMEOUT", "seconds one remote media fetch may take, redirects included"),
    (("--media-load-timeout",), "media_load_timeout", ranged(float, 0.1, 3600.0), _DEFAULTS.load_timeout_s,
     "MLXCEL_MEDIA_LOAD_TIMEOUT", "seconds all the media parts of one request may take to fetch and decode"),
    (("--media-max-redirects",), "media_max_redirects", ranged(int, 0, 20), _DEFAULTS.max_redirects,
     "MLXCEL_MEDIA_MAX_REDIRECTS", "redirects a remote media fetch follows (each target vetted again)"),
    (("--media-max-items",), "media_max_items", ranged(int, 1, 1024), _DEFAULTS.max_items, "MLXCEL_MEDIA_MAX_ITEMS",
     "most media parts in one request"),
    (("--media-max-pixels",), "media_max_pixels", ranged(int, 1), _DEFAULTS.max_pixels, "MLXCEL_MEDIA_MAX_PIXELS",
     "most pixels (width x height, read from the header before decoding) in one image or video frame"),
    (("--media-max-audio-seconds",), "media_max_audio_seconds", ranged(float, 0.1), _DEFAULTS.max_audio_seconds,
     "MLXCEL_MEDIA_MAX_AUDIO_SECONDS", "longest audio part"),
    (("--media-memory",), "media_memory", ranged(int, 1, 1 << 20), _DEFAULTS.max_decoded_bytes // _MIB,
     "MLXCEL_MEDIA_MEMORY", ("MiB of decoded media (pixels, samples) all requests may hold at once; a request "
                            "needing more alone is a 413, one arriving while others hold it a 503")),
    (("--media-temp-dir",), "media_temp_dir", str, None, "MLXCEL_MEDIA_TEMP_DIR",
     ("where fetched and inline video is written (a private 0700 directory per video) before decoding "
      "(default: the system's temporary directory)")),
]

# (flags, dest, type, help): repeatable
MEDIA_LISTS = [
    (("--media-path",), "media_path", str,
     ("directory local media may be read from (file:///ABS/PATH, file://NAME relative to it, or a bare absolute "
      f"path); repeatable or comma-separated (default: none, local files refused) [env: {MEDIA_PATH_ENV}]")),
]


def add_media_lists(parser: argparse.ArgumentParser) -> None:
    for flags, dest, kind, help_text in MEDIA_LISTS:
        parser.add_argument(*flags, dest=dest, type=kind, action="append", default=None, help=help_text)


def _split(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _media_roots(args: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, ...]:
    given = args.media_path if args.media_path is not None else [environ.get(MEDIA_PATH_ENV, "")]
    roots: list[str] = []
    for path in _split(given):
        if not os.path.isdir(path):
            raise MediaUsageError(f"--media-path: not a directory: {path}")
        real = os.path.realpath(path)
        if real not in roots:
            roots.append(real)
    return tuple(roots)


def _video_dirs(environ: Mapping[str, str]) -> tuple[str, ...]:
    """The allowlist as it stands now (read once, at start): relative or missing
    directories are left out, so a mistake closes rather than opens."""
    dirs: list[str] = []
    for path in _split([environ.get(VIDEO_DIRS_ENV, "")]):
        if not os.path.isabs(path) or not os.path.isdir(path):
            log.warning("%s: %s is not an existing absolute directory; local video from it is refused",
                        VIDEO_DIRS_ENV, path)
            continue
        real = os.path.realpath(path)
        if real not in dirs:
            dirs.append(real)
    return tuple(dirs)


def _allow_private(environ: Mapping[str, str]) -> bool:
    text = environ.get(ALLOW_PRIVATE_ENV, "").strip().lower()
    if text in ("", "0", "false", "no", "off"):
        return False
    if text in ("1", "true", "yes", "on"):
        return True
    raise MediaUsageError(f"environment variable {ALLOW_PRIVATE_ENV}: expected 1 or 0, got {text!r}")


def media_settings(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> MediaSettings:
    """The MediaSettings of the parsed flags and the environment; a MediaUsageError for a
    --media-path or --media-temp-dir that is not a directory, or an unreadable variable."""
    if args.media_temp_dir is not None and not os.path.isdir(args.media_temp_dir):
        raise MediaUsageError(f"--media-temp-dir: not a directory: {args.media_temp_dir}")
    return MediaSettings(
        media_paths=_media_roots(args, environ),
        allow_private_urls=_allow_private(environ),
        video_dirs=_video_dirs(environ),
        max_bytes=args.media_max_bytes,
        max_video_bytes=args.media_max_video_bytes,
        fetch_timeout_s=args.media_fetch_timeout,
        load_timeout_s=args.media_load_timeout,
        max_redirects=args.media_max_redirects,
        max_items=args.media_max_items,
        max_pixels=args.media_max_pixels,
        max_audio_seconds=args.media_max_audio_seconds,
        max_decoded_bytes=args.media_memory * _MIB,
        video_max_frames=args.video_max_frames,
        video_fps=args.video_fps,
        temp_dir=args.media_temp_dir,
    )
