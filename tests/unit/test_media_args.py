"""The media flags of `mlxcel serve` and the two variables read once at start."""

from __future__ import annotations

import os

import pytest

from mlxcel.cli.serve_args import parse_serve_args
from mlxcel.cli.usage import UsageError
from mlxcel.config import MediaSettings


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in ("MLXCEL_ALLOW_PRIVATE_MEDIA_URLS", "MLXCEL_VIDEO_DIR_ALLOWLIST", "MLXCEL_MEDIA_PATH",
                 "LLAMA_ARG_VIDEO_FPS", "MLXCEL_VIDEO_MAX_FRAMES"):
        monkeypatch.delenv(name, raising=False)


def test_defaults_are_closed():
    media = parse_serve_args([]).media
    assert media == MediaSettings()
    assert media.media_paths == () and media.video_dirs == () and not media.allow_private_urls


def test_media_flags_reach_the_settings(tmp_path):
    a, b, c = (tmp_path / name for name in "abc")
    for folder in (a, b, c):
        folder.mkdir()
    (tmp_path / "link").symlink_to(a)
    media = parse_serve_args(["--media-path", str(tmp_path / "link"), "--media-path", f"{b},{c}",
                              "--video-max-frames", "8", "--video-fps", "1.5", "--media-max-bytes", "4096",
                              "--media-max-video-bytes", "8192", "--media-fetch-timeout", "2.5",
                              "--media-load-timeout", "9", "--media-max-redirects", "0", "--media-max-items", "3",
                              "--media-max-pixels", "1000000", "--media-max-audio-seconds", "30",
                              "--media-temp-dir", str(c)]).media
    assert media.media_paths == tuple(os.path.realpath(p) for p in (a, b, c))  # symlinks resolved once
    assert (media.video_max_frames, media.video_fps, media.max_bytes, media.max_video_bytes) == (8, 1.5, 4096, 8192)
    assert (media.fetch_timeout_s, media.load_timeout_s, media.max_redirects, media.max_items) == (2.5, 9, 0, 3)
    assert (media.max_pixels, media.max_audio_seconds, media.temp_dir) == (1_000_000, 30, str(c))


def test_environment_variables_are_read_at_start(tmp_path, monkeypatch):
    videos = tmp_path / "videos"
    videos.mkdir()
    monkeypatch.setenv("MLXCEL_ALLOW_PRIVATE_MEDIA_URLS", "1")
    monkeypatch.setenv("MLXCEL_VIDEO_DIR_ALLOWLIST", f"{videos}, {tmp_path}/missing ,relative/dir,")
    monkeypatch.setenv("MLXCEL_MEDIA_PATH", str(tmp_path))
    monkeypatch.setenv("LLAMA_ARG_VIDEO_FPS", "2")
    media = parse_serve_args([]).media
    assert media.allow_private_urls and media.video_fps == 2.0
    assert media.video_dirs == (os.path.realpath(videos),)  # missing and relative entries are left out
    assert media.media_paths == (os.path.realpath(tmp_path),)
    monkeypatch.setenv("MLXCEL_ALLOW_PRIVATE_MEDIA_URLS", "0")
    assert not parse_serve_args([]).media.allow_private_urls


@pytest.mark.parametrize("argv", [["--media-path", "/no/such/dir"], ["--media-temp-dir", "/no/such/dir"],
                                  ["--video-max-frames", "0"],
                                  ["--video-fps", "0"], ["--media-max-bytes", "10"], ["--media-fetch-timeout", "x"]])
def test_bad_media_settings_fail_at_start(argv):
    with pytest.raises(UsageError):
        parse_serve_args(argv)


def test_a_bad_allow_private_value_fails_at_start(monkeypatch):
    monkeypatch.setenv("MLXCEL_ALLOW_PRIVATE_MEDIA_URLS", "maybe")
    with pytest.raises(UsageError, match="MLXCEL_ALLOW_PRIVATE_MEDIA_URLS"):
        parse_serve_args([])
