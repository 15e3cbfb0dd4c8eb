"""Typed errors of the audio workers; mlxcel.http.errors maps them to statuses."""

from __future__ import annotations

from mlxcel.turn.errors import InvalidRequest, TurnError


class AudioModelMissing(TurnError):
    """The server was started without a model for this audio role (501 not_implemented)."""

    def __init__(self, role: str, flag: str, routes: str) -> None:
        super().__init__(f"this server has no {role} model, so {routes} is not served: start it with "
                         f"{flag} (or `server.{role}` in --config)", code="not_implemented")


class AudioDecodeFailed(InvalidRequest):
    """The uploaded file is not audio we can decode (400)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"could not decode the audio file: {detail}. Send WAV, MP3, FLAC, OGG/Opus, M4A or WebM",
                         code="invalid_audio")


class AudioTooLong(InvalidRequest):
    """The uploaded audio lasts longer than --stt-max-seconds (400, as OpenAI answers it)."""

    def __init__(self, max_seconds: float) -> None:
        super().__init__(f"the audio is longer than {max_seconds:g} seconds, the most this server transcribes "
                         "(--stt-max-seconds)", code="audio_too_long")


class AudioTimedOut(TurnError):
    """An audio request ran past --audio-request-timeout-secs (504)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the audio request did not finish within {seconds:g} s "
                         "(--audio-request-timeout-secs)", code="timeout")
