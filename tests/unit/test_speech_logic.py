"""Pure logic of speech to text: subtitle and verbose_json shapes, the language table,
and the whisper worker's queue, timeout and cancellation (a fake model stands in)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from mlxcel.api.audio.transcript_formats import to_srt, to_verbose, to_vtt
from mlxcel.config import ServerConfig
from mlxcel.speech.errors import AudioDecodeFailed, AudioTimedOut
from mlxcel.speech.languages import LANGUAGE_NAMES
from mlxcel.speech.stt_host import SttHost
from mlxcel.speech.stt_worker import WhisperWorker
from mlxcel.speech.transcript import AudioInfo, Segment, TranscribeOptions, Transcript, Word
from mlxcel.turn.errors import ServerBusy


def _segment(i, start, end, text, words=()):
    return Segment(id=i, seek=0, start=start, end=end, text=text, tokens=[1, 2], temperature=0.0, avg_logprob=-0.2,
                   compression_ratio=1.1, no_speech_prob=0.01, words=list(words))


TRANSCRIPT = Transcript("transcribe", AudioInfo("en", 3725.5), [
    _segment(0, 0.0, 1.5, " Hello there.", [Word(0.0, 0.6, " Hello"), Word(0.7, 1.4, " there.")]),
    _segment(1, 1.5, 1.5, " "),  # an empty segment makes no cue
    _segment(2, 3723.25, 3725.125, " Goodbye."),
])


def test_srt_numbers_cues_with_comma_millis_and_skips_empty_text():
    assert to_srt(TRANSCRIPT) == ("1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n"
                                  "2\n01:02:03,250 --> 01:02:05,125\nGoodbye.\n")


def test_vtt_has_its_header_and_dot_millis():
    assert to_vtt(TRANSCRIPT) == ("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n\n"
                                  "01:02:03.250 --> 01:02:05.125\nGoodbye.\n")


def test_verbose_json_names_the_language_and_lists_words_only_when_asked():
    body = to_verbose(TRANSCRIPT, words=True)
    assert body["language"] == "english" and body["task"] == "transcribe" and body["duration"] == 3725.5
    assert body["text"] == "Hello there.  Goodbye."
    assert body["words"] == [{"word": "Hello", "start": 0.0, "end": 0.6}, {"word": "there.", "start": 0.7, "end": 1.4}]
    assert "words" not in to_verbose(TRANSCRIPT, words=False)


def test_the_language_table_is_whispers():
    tokenizer = pytest.importorskip("faster_whisper.tokenizer")
    assert set(LANGUAGE_NAMES) == set(tokenizer._LANGUAGE_CODES)


def test_temperature_zero_means_the_fallback_schedule():
    assert TranscribeOptions().temperatures[0] == 0.0 and len(TranscribeOptions().temperatures) > 1
    assert TranscribeOptions(temperature=0.4).temperatures == 0.4


def test_undecodable_bytes_are_a_clear_400():
    pytest.importorskip("faster_whisper")
    from mlxcel.speech.decode import decode_upload

    with pytest.raises(AudioDecodeFailed, match="could not decode the audio file"):
        decode_upload(b"definitely not audio" * 50, 60.0)
    with pytest.raises(AudioDecodeFailed, match="empty"):
        decode_upload(b"", 60.0)


def _wav(samples: np.ndarray, rate: int, channels: int = 1) -> bytes:
    import io
    import wave

    out = io.BytesIO()
    with wave.open(out, "wb") as file:
        file.setnchannels(channels)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(samples.astype("<i2").tobytes())
    return out.getvalue()


@pytest.mark.parametrize(("rate", "channels"), [(16_000, 1), (44_100, 2), (8_000, 1)])
def test_uploads_decode_as_faster_whisper_decodes_them(rate, channels):
    pytest.importorskip("faster_whisper")
    import io

    from faster_whisper.audio import decode_audio

    from mlxcel.speech.decode import decode_upload, whisper_samples

    t = np.arange(int(rate * 1.5) * channels) / (rate * channels)
    data = _wav((np.sin(2 * np.pi * 440 * t) * 12_000).astype(np.int16), rate, channels)
    ours = decode_upload(data, 60.0)
    assert ours.dtype == np.int16  # what a queued job holds: half of float32's bytes
    np.testing.assert_array_equal(whisper_samples(ours), decode_audio(io.BytesIO(data), sampling_rate=16_000))
    assert abs(ours.size - 24_000) <= 64 and whisper_samples(ours).dtype == np.float32


def test_audio_longer_than_the_limit_is_refused_before_it_is_resampled():
    """32 KB of WAV at 1 Hz is 4.4 hours: 1 GB once resampled to 16 kHz, and gigabytes more
    in the model. It is refused as it is read, and a file within the limit is not."""
    pytest.importorskip("faster_whisper")
    import resource

    from mlxcel.speech.decode import decode_upload
    from mlxcel.speech.errors import AudioTooLong

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(AudioTooLong, match="longer than 7200 seconds"):
        decode_upload(_wav(np.zeros(16_000, np.int16), rate=1), 7200.0)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 200_000  # KiB: far below the 1 GB
    two_seconds = _wav(np.zeros(32_000, np.int16), rate=16_000)
    with pytest.raises(AudioTooLong):
        decode_upload(two_seconds, 1.5)
    assert decode_upload(two_seconds, 2.5).size == 32_000


class SlowModel:
    """Yields `n` segments, each after the gate opens."""

    def __init__(self, n: int = 3) -> None:
        self.n = n
        self.gate = threading.Event()
        self.started = threading.Event()

    def transcribe(self, samples, **kwargs):
        self.started.set()

        def segments():
            for i in range(self.n):
                self.gate.wait(5)
                yield SimpleNamespace(seek=0, start=float(i), end=i + 1.0, text=f" s{i}", tokens=[i], temperature=0.0,
                                      avg_logprob=-0.1, compression_ratio=1.0, no_speech_prob=0.0, words=None)

        return segments(), SimpleNamespace(language="en", duration=float(self.n))


def _host(model, depth=1, timeout=5.0) -> SttHost:
    host = SttHost(ServerConfig(model="x", audio_queue_depth=depth, audio_request_timeout_secs=timeout), "x")
    host.worker = WhisperWorker(model, depth)
    host.worker.start()
    host.ready = True
    return host


async def _all(transcription):
    return [event async for event in transcription.events()]


def test_the_queue_holds_depth_jobs_beyond_the_running_one():
    model = SlowModel()
    host = _host(model, depth=1)

    async def run():
        first = host.submit(np.zeros(10, np.int16), TranscribeOptions())
        await asyncio.to_thread(model.started.wait, 5)
        second = host.submit(np.zeros(10, np.int16), TranscribeOptions())
        with pytest.raises(ServerBusy, match="--audio-queue-depth"):
            host.submit(np.zeros(10, np.int16), TranscribeOptions())
        model.gate.set()
        return await _all(first), await _all(second)

    first, second = asyncio.run(run())
    assert isinstance(first[0], AudioInfo) and [s.text for s in first[1:]] == [" s0", " s1", " s2"]
    assert len(second) == 4
    host.shutdown()


def test_a_waiting_job_whose_client_left_gives_its_queue_place_back():
    model = SlowModel()
    host = _host(model, depth=1)

    async def run():
        first = host.submit(np.zeros(10, np.int16), TranscribeOptions())
        await asyncio.to_thread(model.started.wait, 5)
        left = host.submit(np.zeros(10, np.int16), TranscribeOptions())
        left.cancel()  # its client left while it waited
        assert host.worker.jobs.waiting == 0
        third = host.submit(np.zeros(10, np.int16), TranscribeOptions())  # was a 503 until the first ended
        model.gate.set()
        return await _all(first), await _all(third)

    first, third = asyncio.run(run())
    assert len(first) == 4 and len(third) == 4
    host.shutdown()


def test_check_room_refuses_when_a_submit_would_and_not_before():
    model = SlowModel()
    host = _host(model, depth=1)

    async def run():
        host.check_room()  # nothing waits
        first = host.submit(np.zeros(10, np.int16), TranscribeOptions())
        await asyncio.to_thread(model.started.wait, 5)
        host.check_room()  # one runs, none waits: a place is free
        waiting = host.submit(np.zeros(10, np.int16), TranscribeOptions())
        with pytest.raises(ServerBusy, match="--audio-queue-depth"):
            host.check_room()
        waiting.cancel()  # its client left: the place is free again
        host.check_room()
        model.gate.set()
        return await _all(first)

    assert len(asyncio.run(run())) == 4
    worker = host.worker
    host.shutdown()
    with pytest.raises(ServerBusy, match="shutting down"):
        worker.check_room()


def test_a_slow_job_times_out_and_is_stopped():
    model = SlowModel()
    host = _host(model, timeout=0.2)

    async def run():
        transcription = host.submit(np.zeros(10, np.int16), TranscribeOptions())
        with pytest.raises(AudioTimedOut, match="0.2 s"):
            await _all(transcription)
        return transcription

    transcription = asyncio.run(run())
    assert transcription.job.cancelled.is_set()
    model.gate.set()
    host.shutdown()


def test_a_null_optional_speech_field_reads_as_absent():
    from mlxcel.api.audio.speech_wire import SpeechRequest

    request = SpeechRequest.model_validate({"input": "Hello.", "speed": None, "voice": None, "response_format": None})
    assert request.speed == 1.0 and request.voice is None
    with pytest.raises(ValueError):
        SpeechRequest.model_validate({"input": None})  # the one required field stays required
