"""What a transcription asks for and what it yields: plain dataclasses between the
HTTP edge and the whisper worker."""

from __future__ import annotations

from dataclasses import dataclass, field

# faster-whisper's fallback schedule: temperature 0 first, higher when a window fails
# its compression-ratio or log-probability checks (what OpenAI does for temperature 0)
FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass(frozen=True)
class TranscribeOptions:
    task: str = "transcribe"  # or "translate" (into English)
    language: str | None = None  # ISO-639-1; None: detected
    prompt: str | None = None
    temperature: float | None = None  # None or 0: the fallback schedule
    word_timestamps: bool = False

    @property
    def temperatures(self) -> tuple[float, ...] | float:
        return FALLBACK_TEMPERATURES if not self.temperature else self.temperature


@dataclass(frozen=True)
class Word:
    start: float
    end: float
    word: str


@dataclass(frozen=True)
class Segment:
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: list[Word] = field(default_factory=list)


@dataclass(frozen=True)
class AudioInfo:
    """Known once the audio is measured and its language found, before any segment."""

    language: str
    duration: float


@dataclass
class Transcript:
    task: str
    info: AudioInfo
    segments: list[Segment]

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments).strip()
