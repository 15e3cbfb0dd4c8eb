"""The whisper worker: one thread owns a faster-whisper model and runs transcriptions
one at a time from a bounded queue. Each job reports back through its `emit` callback
(called on the worker thread): the audio's info, each segment as it is decoded, then
done (or the error). A cancelled job is skipped, or stopped at its next segment."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mlxcel.speech.priority import lower_thread_priority
from mlxcel.speech.transcript import AudioInfo, Segment, TranscribeOptions, Word
from mlxcel.turn.errors import ServerBusy

log = logging.getLogger("mlxcel.server")

Emit = Callable[[str, object], None]  # ("info", AudioInfo) | ("segment", Segment) | ("done", None) | ("error", exc)


@dataclass
class TranscriptionJob:
    samples: np.ndarray
    options: TranscribeOptions
    emit: Emit
    cancelled: threading.Event = field(default_factory=threading.Event)


class WhisperWorker:
    def __init__(self, model, depth: int) -> None:
        self.model = model
        self._queue: queue.Queue[TranscriptionJob | None] = queue.Queue(maxsize=depth)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mlxcel-stt", daemon=True)
        self.busy = False

    def start(self) -> None:
        self._thread.start()

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    def submit(self, job: TranscriptionJob) -> None:
        """Queue `job`; ServerBusy (503) when --audio-queue-depth jobs already wait."""
        if self._stopping.is_set():
            raise ServerBusy("the speech-to-text worker is shutting down")
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise ServerBusy(f"All {self._queue.maxsize} speech-to-text queue places are taken "
                             "(--audio-queue-depth). Please try again later.") from None

    def stop(self) -> None:
        self._stopping.set()
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancelled.set()
                job.emit("error", ServerBusy("the server is shutting down"))
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout=5)

    def _run(self) -> None:
        lower_thread_priority()  # the VAD's and the features' work here yields to the chat engine too
        while not self._stopping.is_set():
            job = self._queue.get()
            if job is None:
                return
            if job.cancelled.is_set():
                continue
            self.busy = True
            try:
                self._transcribe(job)
            except Exception as exc:
                log.exception("transcription failed")
                job.emit("error", exc)
            finally:
                self.busy = False

    def _transcribe(self, job: TranscriptionJob) -> None:
        opts = job.options
        segments, info = self.model.transcribe(
            job.samples, language=opts.language, task=opts.task, initial_prompt=opts.prompt,
            temperature=opts.temperatures, word_timestamps=opts.word_timestamps, vad_filter=True,
            beam_size=5, condition_on_previous_text=True)
        job.emit("info", AudioInfo(language=info.language, duration=float(info.duration)))
        for index, seg in enumerate(segments):
            if job.cancelled.is_set():  # the client left or the request timed out
                return
            job.emit("segment", _segment(index, seg))
        job.emit("done", None)


def _segment(index: int, seg) -> Segment:
    words = [Word(start=round(w.start, 3), end=round(w.end, 3), word=w.word) for w in (seg.words or [])]
    return Segment(id=index, seek=int(seg.seek), start=round(seg.start, 3), end=round(seg.end, 3), text=seg.text,
                   tokens=list(seg.tokens), temperature=float(seg.temperature or 0.0),
                   avg_logprob=float(seg.avg_logprob), compression_ratio=float(seg.compression_ratio),
                   no_speech_prob=float(seg.no_speech_prob), words=words)
