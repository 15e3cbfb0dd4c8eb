"""The speech worker: a piper voice loaded on a background thread at start, and one
thread that synthesises requests in turn, sentence by sentence. Requests wait in a
bounded queue (--audio-queue-depth; beyond it 503) and each has a deadline
(--audio-request-timeout-secs; past it 504, or a stream that breaks off). Each
sentence's encoded audio goes back to the request's event loop as soon as it is made,
so a response can stream; a request that is cancelled (its client left) stops at its
next sentence."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlxcel.config import ServerConfig
from mlxcel.speech.job_queue import JobQueue
from mlxcel.speech.tts_encode import AudioFormat, encoder_for
from mlxcel.speech.tts_voice import PiperSpeaker, SpeechSettings, locate_voice
from mlxcel.turn.errors import GenerationFailed, TimedOut
from mlxcel.turn.worker_sleep import SleepingModel

log = logging.getLogger("mlxcel.server")

SENTENCE_PAUSE_SECS = 0.15  # silence between sentences, at speed 1
# the worker's nice: when both want the CPU, running chat streams go first. bench/tts.py --chat
# on 2 cores (SmolLM2 chat at 150 tokens/s alone): nice 0 cut the chat to 48 tokens/s with
# gaps of 175 ms; nice 10 left it at 142 tokens/s, gaps 17 ms, and speech still ran 10x real time
WORKER_NICE = 10


@dataclass
class AudioChunk:
    data: bytes
    n_samples: int  # samples of speech this chunk carries (0 for a container's tail)


_DONE = object()


@dataclass
class SpeechJob:
    sentences: list[str]
    settings: SpeechSettings
    fmt: AudioFormat
    deadline: float  # time.monotonic()
    loop: asyncio.AbstractEventLoop
    results: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def post(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.results.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody is waiting
            self.cancelled.set()

    def cancel(self) -> None:
        self.cancelled.set()


class SpeechHost(SleepingModel):
    kind = "text-to-speech"
    noun = "speech"
    loader = "tts"

    def __init__(self, config: ServerConfig, model: str) -> None:
        self.config = config
        self.model = model
        self.model_id = model if not Path(model).expanduser().exists() else _stem(Path(model).expanduser())
        self.speaker: PiperSpeaker | None = None
        self.ready = False
        self.error: str | None = None
        self._jobs: JobQueue[SpeechJob] = JobQueue(config.audio_queue_depth, "speech")
        self._worker: threading.Thread | None = None
        self._init_sleep()

    # -- loading ----------------------------------------------------------------------------

    def _load(self) -> None:  # SleepingModel: on the loader thread
        started = time.monotonic()
        path = locate_voice(self.model, log=lambda line: log.info("%s", line))
        speaker = PiperSpeaker(path)
        self.speaker = speaker
        self._worker = threading.Thread(target=self._work, name="mlxcel-tts", daemon=True)
        self._worker.start()
        self.ready = True
        log.info("speech model %s loaded in %.1fs: %d Hz, voices %s", self.model_id, time.monotonic() - started,
                 speaker.sample_rate, ", ".join(speaker.voices))

    def require_ready(self) -> PiperSpeaker:
        self._check_ready()
        return self.speaker

    @property
    def outstanding(self) -> int:
        return self._jobs.outstanding

    def _release(self) -> None:
        """Stop the worker (nothing waits or runs) and drop the voice; a later load starts both again."""
        self._jobs.close()
        if self._worker is not None:
            self._worker.join(timeout=5)
        self._worker, self.speaker = None, None
        self._jobs.reopen()

    def shutdown(self) -> None:
        self._jobs.close(cancel_running=True)

    # -- requests -----------------------------------------------------------------------------

    def submit(self, sentences: list[str], settings: SpeechSettings, fmt: AudioFormat) -> SpeechJob:
        """Queues a request, or ServerBusy when --audio-queue-depth requests already wait (one
        whose client left gives its place back)."""
        self.require_ready()
        job = SpeechJob(sentences, settings, fmt, time.monotonic() + self.config.audio_request_timeout_secs,
                        asyncio.get_running_loop())
        self._jobs.put(job)
        return job

    async def chunks(self, job: SpeechJob) -> AsyncIterator[AudioChunk]:
        """The job's audio as it is made; TimedOut past its deadline. Closing this early
        cancels the sentences not yet spoken."""
        try:
            while True:
                remaining = job.deadline - time.monotonic()
                try:
                    item = await asyncio.wait_for(job.results.get(), timeout=max(remaining, 0.001))
                except TimeoutError:
                    raise TimedOut(f"speech took longer than {self.config.audio_request_timeout_secs:g} s "
                                   "(--audio-request-timeout-secs)") from None
                if item is _DONE:
                    return
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            job.cancel()

    # -- the worker thread ----------------------------------------------------------------------

    def _work(self) -> None:
        _lower_priority(worker_nice())
        while (job := self._jobs.take()) is not None:
            try:
                if time.monotonic() < job.deadline:
                    self._speak(job)
            finally:
                self._jobs.done()

    def _speak(self, job: SpeechJob) -> None:
        speaker, encoder = self.speaker, None
        pause = np.zeros(int(speaker.sample_rate * SENTENCE_PAUSE_SECS / job.settings.speed), dtype=np.int16)
        started, n_samples = time.monotonic(), 0
        try:
            encoder = encoder_for(job.fmt, speaker.sample_rate)
            for index, sentence in enumerate(job.sentences):
                if job.cancelled.is_set() or time.monotonic() >= job.deadline:
                    why = "its time ran out" if time.monotonic() >= job.deadline else "cancelled: the client left"
                    log.info("speech stopped after %d of %d sentences (%s)", index, len(job.sentences), why)
                    return
                samples = speaker.synthesize(sentence, job.settings)
                if index and len(samples):
                    samples = np.concatenate([pause, samples])
                n_samples += len(samples)
                data = encoder.encode(samples)
                if data or len(samples):
                    job.post(AudioChunk(data, len(samples)))
            if not n_samples:  # nothing the voice could say ("...", an unassigned code point): a short
                # silence, so the file is well formed (an Ogg, MP3 or AAC of no frames is 0 bytes)
                job.post(AudioChunk(encoder.encode(pause), 0))
            job.post(AudioChunk(encoder.finish(), 0))
            job.post(_DONE)
            elapsed = time.monotonic() - started
            seconds = n_samples / speaker.sample_rate
            log.info("speech: %d sentences, %.1f s of audio in %.2f s (real-time factor %.3f)", len(job.sentences),
                     seconds, elapsed, elapsed / seconds if seconds else 0.0)
        except Exception as exc:  # one request's failure, not the worker's
            log.exception("speech synthesis failed")
            job.post(GenerationFailed(f"speech synthesis failed: {type(exc).__name__}: {exc}"))
        finally:
            if encoder is not None:
                encoder.close()


def worker_nice() -> int:
    """How much lower than the chat engine the worker runs (Linux nice, per thread):
    MLXCEL_TTS_NICE, default WORKER_NICE."""
    try:
        return int(os.environ.get("MLXCEL_TTS_NICE", WORKER_NICE))
    except ValueError:
        return WORKER_NICE


def _lower_priority(nice: int) -> None:
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)  # Linux: this thread only
    except OSError as exc:
        log.debug("could not lower the speech worker's priority: %s", exc)


def _stem(path: Path) -> str:
    """A voice's id from its path: the .onnx file's name without the suffix."""
    try:
        from mlxcel.speech.tts_voice import voice_files

        return voice_files(path)[0].name.removesuffix(".onnx")
    except ValueError:
        return path.name
