"""A piper voice: finding its files (a directory holding one .onnx and its .onnx.json,
the .onnx itself, or a catalog name), loading it into an onnxruntime session that
shares the CPU politely, the names it answers to, and synthesising one sentence."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlxcel.turn.errors import InvalidRequest

# OpenAI's voice names: a client written for OpenAI asks for one of these; each speaks
# with the voice's default speaker
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse")
# onnxruntime threads per synthesis: one core, so the chat engine keeps the rest. bench/tts.py
# --chat on 2 cores: 2 threads speak 1.7x faster alone (real-time factor 0.026 against 0.044)
# but stall a running chat stream for up to 1.9 s (17 tokens/s instead of 150); MLXCEL_TTS_THREADS
ORT_THREADS = 1


def ort_threads() -> int:
    try:
        return max(1, int(os.environ.get("MLXCEL_TTS_THREADS", ORT_THREADS)))
    except ValueError:
        return ORT_THREADS


class VoiceFilesError(ValueError):
    """The voice's files cannot be found or read."""


def voice_files(path: Path) -> tuple[Path, Path]:
    """The .onnx model and its .onnx.json config at `path` (a directory or the .onnx)."""
    if path.is_dir():
        models = sorted(path.glob("*.onnx")) or sorted(path.rglob("*.onnx"))
        if not models:
            raise VoiceFilesError(f"{path}: no piper voice (*.onnx) in this directory")
        if len(models) > 1:
            raise VoiceFilesError(f"{path}: more than one voice here ({', '.join(m.name for m in models)}): "
                                  "name the .onnx file")
        path = models[0]
    if path.suffix != ".onnx" or not path.is_file():
        raise VoiceFilesError(f"{path}: not a piper voice (a .onnx file with its .onnx.json beside it)")
    config = path.with_name(path.name + ".json")
    if not config.is_file():
        raise VoiceFilesError(f"{path}: its config {config.name} is missing")
    return path, config


def locate_voice(name: str, log) -> Path:
    """The .onnx of `name`: a path (directory or file), else what `mlxcel pull` gives for it."""
    path = Path(name).expanduser()
    if not path.exists():
        from mlxcel.models.pull import resolve_model

        path = Path(resolve_model(name, log=log))
    return voice_files(path)[0]


@dataclass
class SpeechSettings:
    speaker_id: int | None
    speed: float  # 0.25..4.0: piper's length_scale is the voice's own divided by it


class PiperSpeaker:
    """One loaded voice. `synthesize` runs on the speech worker thread only."""

    def __init__(self, model_path: Path, threads: int | None = None) -> None:
        try:
            import onnxruntime
            from piper.config import PiperConfig
            from piper.voice import PiperVoice
        except ImportError as exc:
            raise VoiceFilesError(f"text to speech needs piper-tts ({exc}): pip install 'mlxcel[audio]'") from None

        _, config_path = voice_files(model_path)
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise VoiceFilesError(f"{config_path}: {exc}") from None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or ort_threads()
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # idle threads sleep
        session = onnxruntime.InferenceSession(str(model_path), sess_options=options,
                                               providers=["CPUExecutionProvider"])
        self.voice = PiperVoice(session=session, config=PiperConfig.from_dict(config))
        self.name = str(config.get("dataset") or model_path.name.removesuffix(".onnx"))
        self.file_stem = model_path.name.removesuffix(".onnx")
        self.sample_rate = self.voice.config.sample_rate
        self.speakers: dict[str, int] = dict(self.voice.config.speaker_id_map or {})
        self.length_scale = float(self.voice.config.length_scale or 1.0)

    @property
    def voices(self) -> list[str]:
        """The names a request's `voice` may take: each speaker of a multi-speaker voice
        (or the voice's own name), then OpenAI's names."""
        own = list(self.speakers) if self.speakers else [self.name]
        return own + [v for v in OPENAI_VOICES if v not in own]

    def speaker_for(self, voice: str) -> int | None:
        """The speaker id `voice` names (None: the voice's default), or InvalidRequest
        listing the voices."""
        if voice in self.speakers:
            return self.speakers[voice]
        if voice in OPENAI_VOICES or voice in (self.name, self.file_stem):
            return None
        raise InvalidRequest(f"voice {voice!r} is not offered by the speech model: its voices are "
                             f"{', '.join(self.voices)}", param="voice", code="invalid_voice")

    def synthesize(self, sentence: str, settings: SpeechSettings) -> np.ndarray:
        """16-bit samples at `sample_rate` for one sentence (empty if it has nothing to
        say). Another speed than 1: piper's length scale divided by it, then the tempo
        corrected so that the sentence lasts its natural length divided by the speed
        (the length scale alone gives 0.65 of the length at 2.0, and never under 0.5)."""
        audio = self._synthesize(sentence, settings.speaker_id, self.length_scale / settings.speed)
        if settings.speed == 1.0 or not len(audio):
            return audio
        natural = len(self._synthesize(sentence, settings.speaker_id, self.length_scale))
        tempo = len(audio) * settings.speed / natural if natural else 1.0
        if abs(tempo - 1.0) < 0.03:
            return audio
        try:
            from mlxcel.speech.tempo import stretch

            return stretch(audio, self.sample_rate, tempo)
        except ImportError:  # no PyAV: the length scale alone
            return audio

    def _synthesize(self, sentence: str, speaker_id: int | None, length_scale: float) -> np.ndarray:
        from piper.config import SynthesisConfig

        config = SynthesisConfig(speaker_id=speaker_id, length_scale=length_scale)
        parts = [chunk.audio_int16_array for chunk in self.voice.synthesize(sentence, syn_config=config)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)
