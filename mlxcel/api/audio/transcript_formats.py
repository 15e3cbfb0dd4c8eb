"""A transcript in each of OpenAI's response formats: json, text, srt, vtt and
verbose_json (with segments, and words when word granularity was asked)."""

from __future__ import annotations

from mlxcel.speech.languages import language_name
from mlxcel.speech.transcript import Segment, Transcript


def _clock(seconds: float, separator: str) -> str:
    millis = max(0, round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _cues(transcript: Transcript) -> list[Segment]:
    return [s for s in transcript.segments if s.text.strip()]


def to_srt(transcript: Transcript) -> str:
    blocks = [f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n"
              for i, s in enumerate(_cues(transcript), 1)]
    return "\n".join(blocks)


def to_vtt(transcript: Transcript) -> str:
    blocks = [f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n" for s in _cues(transcript)]
    return "WEBVTT\n\n" + "\n".join(blocks)


def to_verbose(transcript: Transcript, words: bool) -> dict:
    body = {
        "task": transcript.task,
        "language": language_name(transcript.info.language),
        "duration": round(transcript.info.duration, 3),
        "text": transcript.text,
        "segments": [{
            "id": s.id, "seek": s.seek, "start": s.start, "end": s.end, "text": s.text, "tokens": s.tokens,
            "temperature": s.temperature, "avg_logprob": s.avg_logprob, "compression_ratio": s.compression_ratio,
            "no_speech_prob": s.no_speech_prob,
        } for s in transcript.segments],
    }
    if words:
        body["words"] = [{"word": w.word.strip(), "start": w.start, "end": w.end}
                         for s in transcript.segments for w in s.words]
    return body
