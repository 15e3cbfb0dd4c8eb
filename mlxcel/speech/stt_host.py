"""The speech-to-text host: a faster-whisper model (CTranslate2 on the CPU, int8) and
its worker thread, loaded on a background thread at start beside the chat model. A
transcription is queued at once (503 beyond --audio-queue-depth), then read as an
async stream of the audio's info and its segments, within --audio-request-timeout-secs."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np

from mlxcel.config import ServerConfig
from mlxcel.models.catalog import CATALOG
from mlxcel.speech.errors import AudioTimedOut
from mlxcel.speech.priority import lower_thread_priority
from mlxcel.speech.stt_worker import TranscriptionJob, WhisperWorker
from mlxcel.speech.transcript import AudioInfo, Segment, TranscribeOptions
from mlxcel.turn.errors import GenerationFailed, ServerBusy
from mlxcel.turn.worker_sleep import SleepingModel

log = logging.getLogger("mlxcel.server")

WHISPER_ALIAS = "whisper-1"  # OpenAI's model name, which clients send unchanged


def whisper_threads(config: ServerConfig) -> int:
    """CTranslate2's threads: half the cores (at least one), so a transcription leaves the
    chat engine the other half instead of both fighting over every core (bench/audio.py
    measures the choice; MLXCEL_STT_THREADS overrides it)."""
    given = os.environ.get("MLXCEL_STT_THREADS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    return max(1, (os.cpu_count() or 2) // 2)


class SttHost(SleepingModel):
    kind = noun = "speech-to-text"
    loader = "stt"

    def __init__(self, config: ServerConfig, model: str) -> None:
        self.config = config
        self.model = model
        self.model_id = model if model in CATALOG else Path(model).name
        self.model_path: Path | None = None
        self.worker: WhisperWorker | None = None
        self.multilingual = True
        self.ready = False
        self.error: str | None = None
        self._init_sleep()

    def _load(self) -> None:  # SleepingModel: on the loader thread
        from mlxcel.models.pull import resolve_model

        started = time.monotonic()
        self.model_path = resolve_model(self.model, log=lambda line: log.info("%s", line))
        try:
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise RuntimeError(f"speech to text needs the audio extra (pip install 'mlxcel[audio]'): {exc}") from None
        threads = whisper_threads(self.config)
        lower_thread_priority()  # before the model starts its threads: they inherit it
        model = WhisperModel(str(self.model_path), device="cpu", compute_type="int8", cpu_threads=threads,
                             num_workers=1, local_files_only=True)
        worker = WhisperWorker(model, self.config.audio_queue_depth)
        worker.start()
        self.worker, self.multilingual = worker, bool(model.model.is_multilingual)
        self.ready = True
        log.info("speech-to-text model %s loaded in %.1fs: %s, %d CPU threads, queue depth %d", self.model_id,
                 time.monotonic() - started, "multilingual" if self.multilingual else "English only", threads,
                 self.config.audio_queue_depth)

    def require_ready(self) -> WhisperWorker:
        self._check_ready()
        return self.worker

    @property
    def outstanding(self) -> int:
        worker = self.worker
        return 0 if worker is None else worker.jobs.outstanding

    def _release(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.stop()  # the model goes with it

    def shutdown(self) -> None:
        if self.worker is not None:
            self.worker.stop()

    def check_room(self) -> None:
        """ServerBusy now when the queue is full (nothing when the model is not loaded
        yet: the route's require_ready answers that)."""
        if self.worker is not None:
            self.worker.check_room()

    def submit(self, samples: np.ndarray, options: TranscribeOptions) -> Transcription:
        """Queue a transcription (ServerBusy at once when --audio-queue-depth jobs wait)."""
        worker = self.require_ready()
        transcription = Transcription(asyncio.get_running_loop(), self.config.audio_request_timeout_secs)
        job = TranscriptionJob(samples, options, transcription.emit)
        transcription.job = job
        worker.submit(job)
        return transcription


class Transcription:
    """One queued transcription: its events as an async stream (the audio's info, then
    each segment as the worker finishes it) within the request timeout (AudioTimedOut).
    `cancel()` (the client left, the stream closed) stops the job at its next segment."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self._loop = loop
        self._events: asyncio.Queue = asyncio.Queue()
        self.timeout = timeout
        self.deadline = loop.time() + timeout
        self.job: TranscriptionJob | None = None

    def emit(self, kind: str, payload: object) -> None:  # on the worker thread
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, (kind, payload))
        except RuntimeError:  # the loop is closed: nobody is waiting
            pass

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancelled.set()

    async def events(self) -> AsyncIterator[AudioInfo | Segment]:
        try:
            while True:
                remaining = self.deadline - self._loop.time()
                try:
                    kind, payload = await asyncio.wait_for(self._events.get(), max(remaining, 0.0))
                except TimeoutError:
                    raise AudioTimedOut(self.timeout) from None
                if kind == "done":
                    return
                if kind == "error":
                    if isinstance(payload, ServerBusy):
                        raise payload
                    raise GenerationFailed(f"transcription failed: {payload}")
                yield payload
        finally:
            self.cancel()  # a no-op once done; else the worker drops or stops the job
