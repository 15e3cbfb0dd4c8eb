"""Test audio made here: English sentences spoken by the piper-joe voice (the piper
library, the voice files from `mlxcel pull piper-joe`), encoded to other formats with
PyAV, and the word error rate of a transcript."""

from __future__ import annotations

import io
import re
import wave

import numpy as np

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Please bring the red book to the kitchen table before dinner.",
    "My brother drives a small green car to work every morning.",
    "We walked along the river and watched the boats sail past the old bridge.",
)

# (container, codec, sample rate) per format name
ENCODINGS = {"mp3": ("mp3", "libmp3lame", 22050), "flac": ("flac", "flac", 22050),
             "ogg": ("ogg", "libopus", 48000), "m4a": ("ipod", "aac", 22050), "webm": ("webm", "libopus", 48000)}


class Speaker:
    """The piper-joe voice; `espeak_voice` "es" makes it read Spanish with Spanish
    phonemes (an American accent, but whisper-base hears Spanish)."""

    def __init__(self, espeak_voice: str | None = None) -> None:
        from piper import PiperVoice

        from mlxcel.models.pull import pull

        folder = pull("piper-joe", progress=False, log=lambda line: None)
        self.voice = PiperVoice.load(str(folder / "en_US-joe-medium.onnx"))
        self.rate = self.voice.config.sample_rate
        if espeak_voice is not None:
            self.voice.config.espeak_voice = espeak_voice

    def samples(self, text: str) -> np.ndarray:
        """int16 mono samples at the voice's rate; without piper's random noise, so a
        clip is the same in every run (with it, whisper-base heard one Spanish clip as
        English in some runs and as Spanish in others)."""
        from piper import SynthesisConfig

        still = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
        return np.concatenate([chunk.audio_int16_array for chunk in self.voice.synthesize(text, syn_config=still)])

    def wav(self, text: str, silence_s: float = 0.0) -> bytes:
        return wav_bytes(self.samples(text), self.rate, silence_s)


def wav_bytes(samples: np.ndarray, rate: int, silence_s: float = 0.0) -> bytes:
    pad = np.zeros(int(rate * silence_s), dtype=np.int16)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(np.concatenate([pad, samples, pad]).astype(np.int16).tobytes())
    return buf.getvalue()


def encode(samples: np.ndarray, rate: int, name: str) -> bytes:
    """int16 mono samples encoded as `name` (mp3, flac, ogg, m4a, webm) with PyAV."""
    import av

    container, codec, out_rate = ENCODINGS[name]
    buf = io.BytesIO()
    with av.open(buf, "w", format=container) as out:
        stream = out.add_stream(codec, rate=out_rate)
        stream.layout = "mono"
        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1).astype(np.int16), format="s16", layout="mono")
        frame.sample_rate = rate
        resampler = av.AudioResampler(format=stream.codec_context.format.name, layout="mono", rate=out_rate)
        for piece in [*resampler.resample(frame), *resampler.resample(None)]:
            for packet in stream.encode(piece):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein distance over words (substitutions, insertions, deletions) divided
    by the reference's word count."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(1, len(ref))
