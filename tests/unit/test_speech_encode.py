"""Encoding speech as it is produced: every format decodes back to the samples' length,
pieces come out before the end (a stream), and unknown formats are a 400."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest

from mlxcel.speech.tts_encode import FORMATS, audio_format, encoder_for, wav_header
from mlxcel.turn.errors import InvalidRequest

RATE = 22050


def tone(seconds: float) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (np.sin(2 * np.pi * 220 * t) * 8000).astype(np.int16)


def test_wav_header_open_ended_and_exact():
    head = wav_header(RATE)
    assert len(head) == 44 and head[40:44] == b"\xff\xff\xff\xff"
    exact = wav_header(RATE, 1000)
    assert struct.unpack("<I", exact[4:8])[0] == 1036 and struct.unpack("<I", exact[40:44])[0] == 1000
    assert struct.unpack("<IHHIIHH", exact[16:36]) == (16, 1, 1, RATE, RATE * 2, 2, 16)


def test_pcm_and_wav_are_the_samples_little_endian():
    samples = tone(0.1)
    pcm = encoder_for(audio_format("pcm"), RATE)
    assert pcm.encode(samples) + pcm.finish() == samples.astype("<i2").tobytes()
    wav = encoder_for(audio_format("wav"), RATE)
    out = wav.encode(samples) + wav.encode(samples) + wav.finish()
    assert out[:44] == wav_header(RATE) and len(out) == 44 + 4 * len(samples)


@pytest.mark.parametrize("name", ["flac", "mp3", "opus", "aac"])
def test_pyav_formats_stream_and_decode(name):
    av = pytest.importorskip("av")
    encoder = encoder_for(audio_format(name), RATE)
    pieces = [encoder.encode(tone(1.0)) for _ in range(3)] + [encoder.finish()]
    assert pieces[0] and pieces[1]  # bytes come out before the end
    with av.open(io.BytesIO(b"".join(pieces))) as container:
        frames = list(container.decode(audio=0))
    seconds = sum(f.samples for f in frames) / frames[0].sample_rate
    assert 2.9 < seconds < 3.2


def test_unknown_format_is_invalid():
    with pytest.raises(InvalidRequest, match="ogg"):
        audio_format("ogg")
    assert set(FORMATS) == {"wav", "pcm", "flac", "mp3", "opus", "aac"}


@pytest.mark.parametrize("tempo", [0.6, 1.27, 2.0])
def test_stretch_changes_the_length_by_the_tempo(tempo):
    pytest.importorskip("av")
    from mlxcel.speech.tempo import stretch

    samples = tone(2.0)
    out = stretch(samples, RATE, tempo)
    assert out.dtype == np.int16
    assert abs(len(samples) / len(out) - tempo) < 0.02
