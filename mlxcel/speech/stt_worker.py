"""The whisper worker: one thread owns a faster-whisper model and runs transcriptions
one at a time from a bounded queue. Each job reports back through its `emit` callback
(called on the worker thread): the audio's info, each segment as it is decoded, then
done (or the error). A cancelled job is skipped, or stopped at its next segment; one
that waits gives its queue place back at once (its client left)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mlxcel.speech.decode import whisper_samples
from mlxcel.speech.job_queue import JobQueue
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
        self.jobs: JobQueue[TranscriptionJob] = JobQueue(depth, "speech-to-text")
        self._thread = threading.Thread(target=self._run, name="mlxcel-stt", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: TranscriptionJob) -> None:
        """Queue `job`; ServerBusy (503) when --audio-queue-depth jobs already wait
        (jobs whose client left do not count: they give their places back)."""
        self.jobs.put(job)

    def check_room(self) -> None:
        """ServerBusy (503) now when a job submitted now would be refused: a route asks
        before it decodes an upload, so a flood is turned away without decoding each."""
        self.jobs.check_room()

    def stop(self) -> None:
        for job in self.jobs.close():
            job.emit("error", ServerBusy("the server is shutting down"))
        self._thread.join(timeout=5)

    def _run(self) -> None:
        lower_thread_priority()  # the VAD's and the features' work here yields to the chat engine too
        while (job := self.jobs.take()) is not None:
            try:
                self._transcribe(job)
            except Exception as exc:
                log.exception("transcription failed")
                job.emit("error", exc)
            finally:
                self.jobs.done()

    def _transcribe(self, job: TranscriptionJob) -> None:
        opts = job.options
        segments, info = self.model.transcribe(
            whisper_samples(job.samples), language=opts.language, task=opts.task, initial_prompt=opts.prompt,
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
