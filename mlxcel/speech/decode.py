"""Uploaded audio → 16 kHz mono float32 samples, by PyAV (faster-whisper's decode_audio):
WAV, MP3, FLAC, OGG/Opus, M4A, WebM and whatever else FFmpeg reads."""

from __future__ import annotations

import asyncio
import io
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from mlxcel.speech.errors import AudioDecodeFailed
from mlxcel.speech.priority import lower_thread_priority

SAMPLE_RATE = 16_000

# uploads decode one at a time on a low-priority thread: a long MP3 takes seconds of CPU
# that the chat engine's streams should not lose
_DECODER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlxcel-audio-decode",
                              initializer=lower_thread_priority)


async def decode_in_background(data: bytes) -> np.ndarray:
    return await asyncio.get_running_loop().run_in_executor(_DECODER, decode_upload, data)


def decode_upload(data: bytes) -> np.ndarray:
    """The samples of an uploaded file; AudioDecodeFailed when it holds no decodable audio."""
    if not data:
        raise AudioDecodeFailed("the file is empty")
    from faster_whisper.audio import decode_audio

    try:
        samples = decode_audio(io.BytesIO(data), sampling_rate=SAMPLE_RATE)
    except Exception as exc:  # noqa: BLE001 - PyAV raises many kinds (InvalidDataError, ValueError, ...)
        raise AudioDecodeFailed(_reason(exc)) from None
    if samples.size == 0:
        raise AudioDecodeFailed("it holds no audio samples")
    return samples


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    if "audio" in text and "stream" in text or isinstance(exc, IndexError):
        return "it has no audio stream"
    return text.splitlines()[0][:200]
