"""mlxcel.media without the network: which addresses a URL may reach, which local paths
may be read, how a reference is classified, and real images, audio and video decoded
(made here with Pillow and PyAV)."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import stat
from dataclasses import replace

import numpy as np
import pytest

from mlxcel.config import MediaSettings
from mlxcel.media import DecodedAudio, DecodedImage, DecodedVideo, MediaError, MediaLoader, MediaRef, check_combination
from mlxcel.media.addresses import is_public
from mlxcel.media.local import resolve
from mlxcel.media.private_file import private_file
from mlxcel.media.sources import Inline, Local, Remote, classify, decode_inline
from mlxcel.media.video import sample_times
from tests.unit.media_samples import encoded_audio, gif_bytes, image_bytes, png_header, tone, video_bytes, wav_bytes


def load(settings: MediaSettings, *refs: MediaRef, rate: int = 16000):
    return asyncio.run(MediaLoader(settings).load(list(refs), rate))


def data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def refused(settings: MediaSettings, ref: MediaRef, status: int = 400) -> MediaError:
    with pytest.raises(MediaError) as caught:
        load(settings, ref)
    assert caught.value.status == status
    assert ref.where in caught.value.message
    return caught.value


# -- addresses


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.8.9.10", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "0.0.0.0", "224.0.0.1", "239.255.255.250", "255.255.255.255", "240.0.0.1", "192.0.0.8", "198.18.0.1",
    "192.0.2.1", "::", "::1", "fc00::1", "fd12:3456::1", "fe80::1", "fe80::1%eth0", "ff02::1", "fec0::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::127.0.0.1", "2002:7f00:1::1",
    "2002:a00:1::", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1", "2001::1", "2001:db8::1",
    "not an address",
])
def test_non_public_addresses_are_refused(address):
    assert not is_public(address)


@pytest.mark.parametrize("address", [
    "8.8.8.8", "1.1.1.1", "93.184.216.34", "2001:4860:4860::8888", "2606:4700:4700::1111", "::ffff:8.8.8.8",
    "2002:808:808::1", "64:ff9b::808:808",
])
def test_public_addresses_pass(address):
    assert is_public(address)


# -- classifying a reference


def test_classify_sources():
    assert classify("https://example.com/a.png", "p") == Remote("https://example.com/a.png")
    assert classify("HTTP://example.com/a.png", "p") == Remote("HTTP://example.com/a.png")
    assert classify("file:///srv/media/a%20b.png", "p") == Local("/srv/media/a b.png")
    assert classify("file://localhost/srv/a.png", "p") == Local("/srv/a.png")
    assert classify("file://cat.png", "p") == Local("cat.png")  # llama-server's: relative to --media-path
    assert classify("/srv/media/a.png", "p") == Local("/srv/media/a.png")
    assert classify("data:image/png;base64,iVBORw0KGgo=", "p") == Inline("iVBORw0KGgo=")
    assert classify("UklGRiQAAABXQVZF", "p") == Inline("UklGRiQAAABXQVZF")  # bare base64 (input_audio)
    jpeg = base64.b64encode(image_bytes("JPEG")).decode()
    assert jpeg.startswith("/9j/") and classify(jpeg, "p") == Inline(jpeg)  # not a path
    mp3 = base64.b64encode(b"\xff\xfb\x90\x64" + bytes(60)).decode()
    assert mp3.startswith("//") and classify(mp3, "p") == Inline(mp3)


@pytest.mark.parametrize("url, status", [
    ("ftp://example.com/a.png", 400), ("gopher://x", 400), ("data:image/png,rawbytes", 400),
    ("data:image/png;base64", 400), ("data:text/html;base64,PGI+", 415), ("not base64 at all!", 400),
    ("", 400), ("file://", 400),
])
def test_malformed_references_are_refused(url, status):
    with pytest.raises(MediaError) as caught:
        classify(url, "messages[0].content[1]")
    assert caught.value.status == status and "messages[0].content[1]" in caught.value.message


def test_inline_payloads_are_capped_before_decoding():
    assert decode_inline(Inline(base64.b64encode(b"x" * 100).decode()), 100, "p") == b"x" * 100
    assert decode_inline(Inline("eHh4"), 3, "p") == b"xxx"
    assert decode_inline(Inline("eHh4eA"), 4, "p") == b"xxxx"  # unpadded
    with pytest.raises(MediaError) as caught:
        decode_inline(Inline(base64.b64encode(b"x" * 101).decode()), 100, "p")
    assert caught.value.status == 413
    with pytest.raises(MediaError):
        decode_inline(Inline("e$h4"), 100, "p")


# -- local paths


@pytest.fixture
def roots(tmp_path):
    root = tmp_path / "media"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.png").write_bytes(image_bytes("PNG"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.png").write_bytes(image_bytes("PNG"))
    (root / "escape.png").symlink_to(outside / "secret.png")
    (root / "escape_dir").symlink_to(outside)
    (root / "inner_link.png").symlink_to(root / "sub" / "a.png")
    return os.path.realpath(root), os.path.realpath(outside)


def test_local_paths_inside_the_roots_resolve(roots):
    root, _ = roots
    assert resolve(f"{root}/sub/a.png", (root,), "p", "--media-path") == f"{root}/sub/a.png"
    assert resolve("sub/a.png", (root,), "p", "--media-path") == f"{root}/sub/a.png"
    assert resolve(f"{root}/inner_link.png", (root,), "p", "--media-path") == f"{root}/sub/a.png"


@pytest.mark.parametrize("path", [
    "{outside}/secret.png", "{root}/escape.png", "{root}/escape_dir/secret.png", "escape.png",
    "{root}/sub/../sub/a.png", "../outside/secret.png", "/etc/passwd", "{root}x/a.png",
])
def test_local_paths_outside_the_roots_are_refused(roots, path):
    root, outside = roots
    with pytest.raises(MediaError) as caught:
        resolve(path.format(root=root, outside=outside), (root,), "messages[1].content[0]", "--media-path")
    assert caught.value.status == 400 and "messages[1].content[0]" in caught.value.message


def test_no_roots_refuses_every_local_file(roots):
    root, _ = roots
    with pytest.raises(MediaError, match="no --media-path"):
        resolve(f"{root}/sub/a.png", (), "p", "--media-path")


def test_the_loader_reads_local_images_only_under_media_path(roots):
    root, outside = roots
    settings = MediaSettings(media_paths=(root,))
    for url in (f"file://{root}/sub/a.png", f"{root}/sub/a.png", "file://sub/a.png"):
        (image,) = load(settings, MediaRef("image", url, "messages[0].content[1]"))
        assert (image.width, image.height) == (7, 5)
    refused(settings, MediaRef("image", f"file://{outside}/secret.png", "messages[0].content[2]"))
    refused(settings, MediaRef("image", f"file://{root}/escape.png", "messages[0].content[3]"))
    refused(MediaSettings(), MediaRef("image", f"{root}/sub/a.png", "messages[0].content[4]"))
    refused(settings, MediaRef("image", f"{root}/missing.png", "messages[0].content[5]"))
    os.mkfifo(f"{root}/fifo.png")  # opening it must not block
    refused(settings, MediaRef("image", f"{root}/fifo.png", "messages[0].content[6]"))
    refused(replace(settings, max_bytes=10), MediaRef("image", f"{root}/sub/a.png", "messages[0].content[7]"), 413)


def test_local_video_only_under_the_video_allowlist(tmp_path):
    videos = tmp_path / "videos"
    videos.mkdir()
    (videos / "clip.mp4").write_bytes(video_bytes())
    clip = str(videos / "clip.mp4")
    real = os.path.realpath(videos)
    # --media-path alone does not open local video: the allowlist is fail-closed
    error = refused(MediaSettings(media_paths=(real,)), MediaRef("video", clip, "messages[0].content[0]"))
    assert "MLXCEL_VIDEO_DIR_ALLOWLIST" in error.message
    refused(MediaSettings(video_dirs=(os.path.realpath(tmp_path / "other"),)),
            MediaRef("video", clip, "messages[0].content[0]"))
    (video,) = load(MediaSettings(video_dirs=(real,)), MediaRef("video", f"file://{clip}", "messages[0].content[0]"))
    assert isinstance(video, DecodedVideo) and len(video.frames) == 8


# -- images


@pytest.mark.parametrize("fmt, mime", [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")])
def test_images_decode_to_rgb(fmt, mime):
    (image,) = load(MediaSettings(), MediaRef("image", data_uri(mime, image_bytes(fmt)), "p"))
    assert isinstance(image, DecodedImage)
    assert (image.width, image.height) == (7, 5) and len(image.rgb) == 7 * 5 * 3
    r, g, b = image.rgb[:3]
    assert abs(r - 200) <= 8 and abs(g - 30) <= 8 and abs(b - 40) <= 8


def test_a_16_bit_greyscale_png_keeps_its_grey_levels():
    """Its top 8 bits, as stb_image gives llama-server (Pillow's conversion clipped every
    level above 255 to white)."""
    from PIL import Image

    levels = np.array([[0, 0x1234, 0x8000, 0xFFFF]], dtype=np.uint16)
    buffer = io.BytesIO()
    Image.fromarray(levels).save(buffer, format="PNG")
    (image,) = load(MediaSettings(), MediaRef("image", data_uri("image/png", buffer.getvalue()), "p"))
    assert image.rgb == bytes(v for level in (0x00, 0x12, 0x80, 0xFF) for v in (level,) * 3)


def test_a_gif_gives_its_first_frame_and_digests_follow_the_pixels():
    (first,) = load(MediaSettings(), MediaRef("image", data_uri("image/gif", gif_bytes()), "p"))
    assert first.rgb[:3] == bytes((255, 0, 0)) and (first.width, first.height) == (4, 3)
    a, b, c = load(MediaSettings(), *(MediaRef("image", data_uri("image/png", image_bytes("PNG", colour=colour)), "p")
                                      for colour in ((1, 2, 3), (1, 2, 3), (1, 2, 4))))
    assert a.digest == b.digest != c.digest


def test_bomb_and_unsupported_images_are_refused_before_decoding():
    settings = MediaSettings(max_pixels=1 << 25)
    bomb = data_uri("image/png", png_header(6000, 6000))  # 36 Mpx claimed by a few bytes
    error = refused(settings, MediaRef("image", bomb, "messages[2].content[0]"), 413)
    assert "6000x6000" in error.message
    refused(settings, MediaRef("image", data_uri("image/png", png_header(100_000, 100_000)), "p"), 413)  # Pillow's own
    refused(settings, MediaRef("image", data_uri("image/bmp", image_bytes("BMP")), "p"), 415)
    truncated = image_bytes("JPEG", size=(64, 64))[:-200]
    refused(settings, MediaRef("image", data_uri("image/jpeg", truncated), "p"), 400)


# -- audio


@pytest.mark.parametrize("bits, float_format", [(8, False), (16, False), (24, False), (32, False), (32, True),
                                                (64, True)])
def test_wav_encodings_decode_to_the_same_samples(bits, float_format):
    expected = tone(16000, 0.25)[:, 0]
    (audio,) = load(MediaSettings(), MediaRef("audio", data_uri("audio/wav", wav_bytes(tone(16000, 0.25), 16000,
                                                                                       bits, float_format)), "p"))
    assert isinstance(audio, DecodedAudio) and audio.samples.dtype == np.float32 and audio.sample_rate == 16000
    assert np.abs(audio.samples - expected).max() < (0.02 if bits == 8 else 1e-3)


def test_wav_is_downmixed_and_resampled():
    wav = wav_bytes(tone(44100, 0.5, channels=2), 44100)
    (audio,) = load(MediaSettings(), MediaRef("audio", base64.b64encode(wav).decode(), "p", format="wav"), rate=16000)
    assert audio.sample_rate == 16000 and abs(audio.samples.size - 8000) <= 32
    assert 0.45 < np.abs(audio.samples).max() < 0.55


@pytest.mark.parametrize("container, codec, rate", [("mp3", "libmp3lame", 44100), ("flac", "flac", 44100),
                                                    ("ogg", "libopus", 48000)])
def test_compressed_audio_decodes_with_pyav(container, codec, rate):
    data = encoded_audio(container, codec, rate=rate)
    (audio,) = load(MediaSettings(), MediaRef("audio", data_uri(f"audio/{container}", data), "p"), rate=16000)
    assert audio.sample_rate == 16000 and abs(audio.samples.size - 8000) < 400
    assert 0.4 < np.abs(audio.samples).max() < 0.6


def test_long_and_unknown_audio_are_refused():
    wav = wav_bytes(tone(8000, 3.0), 8000)
    refused(MediaSettings(max_audio_seconds=2.0), MediaRef("audio", data_uri("audio/wav", wav), "p"), 413)
    flac = encoded_audio("flac", "flac", seconds=3.0)
    refused(MediaSettings(max_audio_seconds=2.0), MediaRef("audio", data_uri("audio/flac", flac), "p"), 413)
    refused(MediaSettings(), MediaRef("audio", data_uri("audio/aac", b"\x00\x01not audio" * 10), "p"), 415)


# -- video


def test_sample_times_follow_fps_then_spread_evenly():
    assert sample_times(2.0, 2.0, 32) == [0.0, 0.5, 1.0, 1.5]
    assert sample_times(10.0, 4.0, 4) == [1.25, 3.75, 6.25, 8.75]
    assert sample_times(None, 2.0, 3) == [0.0, 0.5, 1.0]


def test_video_frames_are_sampled_in_order_at_the_fps():
    clip = data_uri("video/mp4", video_bytes(seconds=2.0, fps=10))  # frame i is grey 10 * i
    (video,) = load(MediaSettings(video_fps=4.0), MediaRef("video", clip, "p"))
    assert len(video.frames) == 8
    greys = [frame.rgb[0] for frame in video.frames]
    assert greys == sorted(greys) and abs(greys[4] - 100) <= 6  # t = 1.0 s
    (two_fps,) = load(MediaSettings(), MediaRef("video", clip, "p", fps=2.0))
    assert len(two_fps.frames) == 4
    (capped,) = load(MediaSettings(video_max_frames=3), MediaRef("video", clip, "p"))
    assert [abs(f.rgb[0] - g) <= 8 for f, g in zip(capped.frames, (40, 100, 170))] == [True] * 3
    refused(MediaSettings(max_video_bytes=100), MediaRef("video", clip, "p"), 413)
    refused(MediaSettings(max_pixels=100), MediaRef("video", clip, "p"), 413)


@pytest.mark.parametrize("container, codec", [("webm", "libvpx"), ("matroska", "mpeg4"), ("avi", "mpeg4"),
                                             ("mpegts", "mpeg2video")])
def test_other_containers_sample_the_same_times(container, codec):
    clip = data_uri("video/x", video_bytes(seconds=1.0, container=container, codec=codec))
    (video,) = load(MediaSettings(), MediaRef("video", clip, "p"))
    assert [abs(frame.rgb[0] - grey) <= 8 for frame, grey in zip(video.frames, (0, 30, 50, 80))] == [True] * 4


def test_video_demuxers_are_chosen_by_magic_never_probed(tmp_path):
    playlist = b"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n"
    refused(MediaSettings(), MediaRef("video", data_uri("video/mp4", playlist), "p"), 415)
    concat = b"ffconcat version 1.0\nfile /etc/passwd\n"
    refused(MediaSettings(), MediaRef("video", data_uri("video/mp4", concat), "p"), 415)
    gif = data_uri("image/gif", gif_bytes())  # an animated GIF is a clip too
    (video,) = load(MediaSettings(), MediaRef("video", gif, "p", fps=10.0))
    assert [frame.rgb[:3] for frame in video.frames] == [bytes((255, 0, 0)), bytes((0, 0, 255))]


def test_video_files_are_private_and_removed(tmp_path):
    with private_file(str(tmp_path)) as (file, path):
        directory = os.path.dirname(path)
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        file.write(b"x")
    assert not os.path.exists(directory)
    clip = data_uri("video/mp4", video_bytes(seconds=0.5))
    load(MediaSettings(temp_dir=str(tmp_path)), MediaRef("video", clip, "p"))
    assert os.listdir(tmp_path) == []


# -- the request as a whole


def test_video_with_audio_is_refused():
    refs = [MediaRef("video", "https://example.com/v.mp4", "a"), MediaRef("audio", "UklGRg==", "b")]
    with pytest.raises(MediaError, match="^Combined video and audio inputs are not supported$") as caught:
        check_combination(refs)
    assert caught.value.status == 400
    check_combination([MediaRef("image", "x", "a"), MediaRef("video", "y", "b")])
    check_combination([MediaRef("image", "x", "a"), MediaRef("audio", "y", "b")])
    with pytest.raises(MediaError, match="Combined video and audio"):
        load(MediaSettings(), *refs)


def test_counts_and_order():
    png = data_uri("image/png", image_bytes("PNG"))
    with pytest.raises(MediaError, match="more than the limit of 2"):
        load(MediaSettings(max_items=2), *(MediaRef("image", png, f"p{i}") for i in range(3)))
    wav = data_uri("audio/wav", wav_bytes(tone(16000, 0.1), 16000))
    out = load(MediaSettings(), MediaRef("image", png, "a"), MediaRef("audio", wav, "b"), MediaRef("image", png, "c"))
    assert [type(x) for x in out] == [DecodedImage, DecodedAudio, DecodedImage]
    assert load(MediaSettings()) == []
