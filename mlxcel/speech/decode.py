"""Uploaded audio → 16 kHz mono float32 samples, by PyAV as faster-whisper's decode_audio
does it: WAV, MP3, FLAC, OGG/Opus, M4A, WebM and whatever else FFmpeg reads.

The audio's length is counted as it is read, before any of it is resampled: a small file
can claim hours (a WAV of 32 KB at a sample rate of 1 Hz is 4.4 hours, 1 GB at 16 kHz
and gigabytes more in the model), so past `--stt-max-seconds` it is refused (400)."""

from __future__ import annotations

import asyncio
import gc
import io
import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from mlxcel.speech.errors import AudioDecodeFailed, AudioTooLong
from mlxcel.speech.priority import lower_thread_priority

SAMPLE_RATE = 16_000
GROUP_SAMPLES = 500_000  # source samples resampled at once (faster-whisper's grouping)

# uploads decode one at a time on a low-priority thread: a long MP3 takes seconds of CPU
# that the chat engine's streams should not lose
_DECODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlxcel-audio-decode",
                              initializer=lower_thread_priority)


async def decode_in_background(data: bytes, max_seconds: float) -> np.ndarray:
    return await asyncio.get_running_loop().run_in_executor(_DECODER, decode_upload, data, max_seconds)


def decode_upload(data: bytes, max_seconds: float) -> np.ndarray:
    """The 16 kHz mono 16-bit samples of an uploaded file; AudioDecodeFailed when it holds no decodable audio,
    AudioTooLong when it lasts longer than `max_seconds`."""
    if not data:
        raise AudioDecodeFailed("the file is empty")
    try:
        samples = _decode(data, max_seconds)
    except AudioTooLong:
        raise
    except Exception as exc:  # noqa: BLE001 - PyAV raises many kinds (InvalidDataError, ValueError, ...)
        raise AudioDecodeFailed(_reason(exc)) from None
    if samples.size == 0:
        raise AudioDecodeFailed("it holds no audio samples")
    return samples


def _decode(data: bytes, max_seconds: float) -> np.ndarray:
    import av

    resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
    fifo = av.AudioFifo()
    pieces: list[np.ndarray] = []
    seconds = 0.0
    with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
        for frame in _valid_frames(container.decode(audio=0)):
            if frame.sample_rate <= 0:
                raise AudioDecodeFailed("its sample rate is not positive")
            seconds += frame.samples / frame.sample_rate
            if seconds > max_seconds:
                raise AudioTooLong(max_seconds)
            frame.pts = None  # as faster-whisper: timestamps are not checked
            fifo.write(frame)
            if fifo.samples >= GROUP_SAMPLES:
                pieces += [out.to_ndarray().reshape(-1) for out in resampler.resample(fifo.read())]
        rest = [fifo.read()] if fifo.samples else []
        for group in itertools.chain(rest, [None]):  # None flushes the resampler
            pieces += [out.to_ndarray().reshape(-1) for out in resampler.resample(group)]
    del resampler, fifo
    gc.collect()  # PyAV's resampler holds buffers until collected (faster-whisper #390)
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int16)


def whisper_samples(samples: np.ndarray) -> np.ndarray:
    """16-bit samples as the float32 faster-whisper reads (its own decode's scale). A
    queued job holds the 16-bit ones, half the memory: two hours are 230 MB, not 460."""
    return np.multiply(samples, np.float32(1 / 32768), dtype=np.float32)


def _valid_frames(frames):
    """The frames a decoder yields, skipping those it finds invalid (as faster-whisper)."""
    import av

    iterator = iter(frames)
    while True:
        try:
            yield next(iterator)
        except StopIteration:
            return
        except av.error.InvalidDataError:
            continue


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    if "audio" in text and "stream" in text or isinstance(exc, IndexError):
        return "it has no audio stream"
    return text.splitlines()[0][:200]
