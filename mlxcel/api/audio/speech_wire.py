"""Wire model of POST /v1/audio/speech (OpenAI's JSON body), checked before any work."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field, StrictStr

from mlxcel.turn.errors import InvalidRequest
from mlxcel.turn.null_fields import NullAsAbsent

MAX_INPUT_CHARS = 4096  # OpenAI's limit on `input`
OPENAI_TTS_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
STREAM_FORMATS = ("audio", "sse")
HONORED = frozenset({"model", "input", "voice", "response_format", "speed", "stream_format"})
IGNORED = frozenset({"instructions"})  # a piper voice cannot be steered by a prompt


class SpeechRequest(NullAsAbsent):
    model_config = ConfigDict(extra="allow")

    model: StrictStr | None = None
    input: StrictStr
    voice: StrictStr | None = None  # None: the voice's default speaker
    response_format: StrictStr | None = None
    speed: Annotated[float, Field(strict=True, ge=0.25, le=4.0)] = 1.0
    instructions: StrictStr | None = None
    stream_format: StrictStr | None = None

    def text(self) -> str:
        if not self.input.strip():
            raise InvalidRequest("`input` must not be empty", param="input")
        if len(self.input) > MAX_INPUT_CHARS:
            raise InvalidRequest(f"`input` holds {len(self.input)} characters; at most {MAX_INPUT_CHARS} are spoken "
                                 "per request", param="input", code="string_above_max_length")
        return self.input

    def stream_kind(self) -> str:
        kind = self.stream_format or "audio"
        if kind not in STREAM_FORMATS:
            raise InvalidRequest(f"stream_format {kind!r} is not supported: use 'audio' or 'sse'",
                                 param="stream_format")
        return kind
