"""Audio to mono float32 at the rate the projector needs. WAV (8-, 16-, 24- and 32-bit
PCM, 32- and 64-bit float) is read with numpy straight from its RIFF chunks; MP3, FLAC
and OGG are decoded with PyAV. Both are downmixed by averaging the channels, resampled with
libswresample and capped in duration."""

from __future__ import annotations

import io
import struct

import numpy as np

from mlxcel.media.types import DecodedAudio, MediaError, audio_of

_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE


def sniff(data: bytes) -> str | None:
    """The container `data` starts with: wav, mp3, flac, ogg, or None."""
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "wav"
    if data[:4] == b"fLaC":
        return "flac"
    if data[:4] == b"OggS":
        return "ogg"
    if data[:3] == b"ID3" or (len(data) > 1 and data[0] == 0xFF and data[1] & 0xE0 == 0xE0):
        return "mp3"
    return None


def decode_audio(data: bytes, sample_rate: int, max_seconds: float, where: str, stop=lambda: False) -> DecodedAudio:
    kind = sniff(data)
    if kind is None:
        raise MediaError(f"{where}: unsupported audio format (WAV, MP3, FLAC or OGG expected)",
                         "unsupported_media_type", 415)
    if kind == "wav":
        samples, rate = _read_wav(data, max_seconds, where)
        samples = _resample(samples, rate, sample_rate) if rate != sample_rate else samples
    else:
        samples = _decode_with_av(data, kind, sample_rate, max_seconds, where, stop)
    if samples.size == 0:
        raise MediaError(f"{where}: the audio has no samples", "invalid_media")
    return audio_of(samples, sample_rate)


def _too_long(max_seconds: float, where: str) -> MediaError:
    return MediaError(f"{where}: the audio is longer than the {max_seconds:g}-second limit", "media_too_large", 413)


def _read_wav(data: bytes, max_seconds: float, where: str) -> tuple[np.ndarray, int]:
    fmt: tuple | None = None
    pos = 12
    while pos + 8 <= len(data):
        chunk_id, size = data[pos:pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
        body = data[pos + 8:pos + 8 + size]
        if chunk_id == b"fmt " and len(body) >= 16:
            tag, channels, rate, _, _, bits = struct.unpack_from("<HHIIHH", body)
            if tag == _EXTENSIBLE and len(body) >= 26:
                tag = struct.unpack_from("<H", body, 24)[0]
            fmt = (tag, channels, rate, bits)
        elif chunk_id == b"data" and fmt is not None:
            return _wav_samples(body, *fmt, max_seconds, where)
        pos += 8 + size + (size & 1)
    raise MediaError(f"{where}: malformed WAV (no fmt or data chunk)", "invalid_media")


def _wav_samples(body: bytes, tag: int, channels: int, rate: int, bits: int, max_seconds: float,
                 where: str) -> tuple[np.ndarray, int]:
    width = bits // 8
    if channels < 1 or not 1 <= rate <= 768_000 or bits % 8 or not 1 <= width <= 8:
        raise MediaError(f"{where}: malformed WAV header", "invalid_media")
    frames = len(body) // (width * channels)
    if frames / rate > max_seconds:
        raise _too_long(max_seconds, where)
    raw = body[:frames * width * channels]
    if tag == _FLOAT and width in (4, 8):
        samples = np.frombuffer(raw, dtype="<f4" if width == 4 else "<f8").astype(np.float32)
    elif tag == _PCM and width == 1:
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif tag == _PCM and width in (2, 4):
        dtype = "<i2" if width == 2 else "<i4"
        samples = np.frombuffer(raw, dtype=dtype).astype(np.float32) / float(1 << (bits - 1))
    elif tag == _PCM and width == 3:
        triples = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        values = triples[:, 0] | (triples[:, 1] << 8) | (triples[:, 2] << 16)
        values = np.where(values >= 1 << 23, values - (1 << 24), values)
        samples = values.astype(np.float32) / float(1 << 23)
    else:
        raise MediaError(f"{where}: unsupported WAV encoding (format {tag}, {bits} bits)",
                         "unsupported_media_type", 415)
    return samples.reshape(-1, channels).mean(axis=1, dtype=np.float32), rate


def _resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    import av

    frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt", layout="mono")
    frame.sample_rate = rate
    resampler = av.AudioResampler(format="flt", layout="mono", rate=target)
    pieces = [out.to_ndarray().reshape(-1) for out in resampler.resample(frame)]
    pieces += [out.to_ndarray().reshape(-1) for out in resampler.resample(None)]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)


def _mono(frame) -> np.ndarray:
    """A planar frame's channels averaged (as the WAV path does; swresample's downmix
    would add gain)."""
    return frame.to_ndarray().mean(axis=0, dtype=np.float32)


def _decode_with_av(data: bytes, kind: str, target: int, max_seconds: float, where: str, stop) -> np.ndarray:
    import av

    limit = int(max_seconds * target)
    pieces: list[np.ndarray] = []
    total = 0
    try:
        with av.open(io.BytesIO(data), format=kind) as container:
            if not container.streams.audio:
                raise MediaError(f"{where}: the file has no audio stream", "invalid_media")
            resampler = av.AudioResampler(format="fltp", rate=target)  # channels kept, averaged below
            for frame in container.decode(container.streams.audio[0]):
                for out in resampler.resample(frame):
                    pieces.append(_mono(out))
                    total += pieces[-1].size
                if total > limit:
                    raise _too_long(max_seconds, where)
                if stop():
                    raise MediaError(f"{where}: decoding the audio was cut short", "media_timeout")
            pieces += [_mono(out) for out in resampler.resample(None)]
    except (av.error.FFmpegError, ValueError, OSError) as exc:
        raise MediaError(f"{where}: the audio could not be decoded ({exc})", "invalid_media") from None
    return np.concatenate(pieces).astype(np.float32, copy=False) if pieces else np.zeros(0, np.float32)
