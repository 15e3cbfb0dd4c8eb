"""Encoding synthesised speech (16-bit mono samples) as it is produced, sentence by
sentence: each `encode` returns the bytes ready to send so far, `finish` the rest.
WAV and PCM by the standard library; FLAC, MP3, Ogg Opus and AAC (ADTS) by PyAV.
A streamed WAV's header cannot know the length: it says 0xFFFFFFFF, as OpenAI's does."""

from __future__ import annotations

import functools
import logging
import struct
from dataclasses import dataclass

import numpy as np

from mlxcel.turn.errors import InvalidRequest

log = logging.getLogger("mlxcel.server")


@dataclass(frozen=True)
class AudioFormat:
    name: str
    content_type: str
    container: str | None = None  # PyAV's muxer; None: written here
    codec: str | None = None
    rate: int | None = None  # the codec's sample rate when it cannot take the voice's own
    options: tuple[tuple[str, str], ...] = ()


FORMATS = {f.name: f for f in (
    AudioFormat("wav", "audio/wav"),
    AudioFormat("pcm", "audio/pcm"),
    AudioFormat("flac", "audio/flac", "flac", "flac"),
    AudioFormat("mp3", "audio/mpeg", "mp3", "libmp3lame"),
    AudioFormat("opus", "audio/ogg; codecs=opus", "ogg", "libopus", rate=48000,
                options=(("page_duration", "100000"),)),  # an Ogg page every 100 ms, not every second
    AudioFormat("aac", "audio/aac", "adts", "aac"),
)}
DEFAULT_FORMAT = "wav"  # the spec's audio server speaks WAV; OpenAI's default is mp3


def audio_format(name: str) -> AudioFormat:
    """The format `name`, checked that this install can encode it (else InvalidRequest)."""
    fmt = FORMATS.get(name)
    if fmt is None:
        raise InvalidRequest(f"response_format {name!r} is not supported: use one of {', '.join(FORMATS)}",
                             param="response_format")
    if fmt.codec is not None and not _can_encode(fmt):
        raise InvalidRequest(f"response_format {name!r} cannot be produced here: the audio library has no "
                             f"{fmt.codec} encoder", param="response_format")
    return fmt


@functools.cache
def _can_encode(fmt: AudioFormat) -> bool:
    try:
        import av

        av.codec.Codec(fmt.codec, "w")
        av.format.ContainerFormat(fmt.container, "w")
    except Exception:  # noqa: BLE001 - no PyAV, or it lacks this codec
        return False
    return True


class StreamEncoder:
    """Base: `encode` a sentence's samples, then `finish` once."""

    def encode(self, samples: np.ndarray) -> bytes:
        raise NotImplementedError

    def finish(self) -> bytes:
        return b""

    def close(self) -> None:
        """Drop what is left (the request ended early)."""


class PcmEncoder(StreamEncoder):
    def encode(self, samples: np.ndarray) -> bytes:
        return samples.astype("<i2", copy=False).tobytes()


class WavEncoder(PcmEncoder):
    def __init__(self, rate: int) -> None:
        self.rate = rate
        self.started = False

    def encode(self, samples: np.ndarray) -> bytes:
        head = b"" if self.started else wav_header(self.rate)
        self.started = True
        return head + super().encode(samples)

    def finish(self) -> bytes:
        return b"" if self.started else wav_header(self.rate)


def wav_header(rate: int, n_bytes: int | None = None) -> bytes:
    """A 44-byte header of 16-bit mono PCM; without `n_bytes` the open-ended one."""
    data = 0xFFFFFFFF if n_bytes is None else n_bytes
    riff = 0xFFFFFFFF if n_bytes is None else 36 + n_bytes
    return (b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
            + b"data" + struct.pack("<I", data))


class _Sink:
    """What the muxer writes, held until the next drain (not seekable: a stream)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        out = b"".join(self.parts)
        self.parts.clear()
        return out


class PyAVEncoder(StreamEncoder):
    def __init__(self, fmt: AudioFormat, rate: int) -> None:
        import av

        self._av = av
        self.rate = rate
        self.sink = _Sink()
        self.container = av.open(self.sink, "w", format=fmt.container, options=dict(fmt.options))
        self.stream = self.container.add_stream(fmt.codec, rate=fmt.rate or rate)
        self.stream.layout = "mono"
        self.resampler = None
        self.closed = False

    def encode(self, samples: np.ndarray) -> bytes:
        if len(samples):
            frame = self._av.AudioFrame.from_ndarray(samples.astype(np.int16).reshape(1, -1), format="s16",
                                                     layout="mono")
            frame.sample_rate = self.rate
            self._push(frame)
        return self.sink.drain()

    def _push(self, frame) -> None:
        if self.resampler is None:
            codec = self.stream.codec_context
            self.resampler = self._av.AudioResampler(format=codec.format.name, layout="mono", rate=codec.sample_rate)
        for out in self.resampler.resample(frame):
            for packet in self.stream.encode(out):
                self.container.mux(packet)

    def finish(self) -> bytes:
        if self.resampler is not None:
            self._push(None)
        for packet in self.stream.encode(None):
            self.container.mux(packet)
        self.container.close()
        self.closed = True
        return self.sink.drain()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.container.close()
            except Exception as exc:  # noqa: BLE001 - an abandoned stream: nothing to report
                log.debug("closing an abandoned audio encoder: %s", exc)


def encoder_for(fmt: AudioFormat, rate: int) -> StreamEncoder:
    if fmt.name == "wav":
        return WavEncoder(rate)
    if fmt.name == "pcm":
        return PcmEncoder()
    return PyAVEncoder(fmt, rate)
