"""The fields of a transcription or translation form, as OpenAI's SDK sends them,
checked at the edge: every bad value is a 400 naming the field."""

from __future__ import annotations

import math
from dataclasses import dataclass

from starlette.datastructures import FormData, UploadFile

from mlxcel.api.audio.upload import FILE_LIMIT, too_large
from mlxcel.http.errors import invalid_request
from mlxcel.speech.languages import LANGUAGE_NAMES

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
GRANULARITIES = ("word", "segment")
STREAM_FORMATS = ("json", "text")
KNOWN = {"file", "model", "language", "prompt", "response_format", "temperature", "timestamp_granularities[]",
         "timestamp_granularities", "stream", "include[]", "chunking_strategy"}


@dataclass
class TranscriptionForm:
    filename: str
    data: bytes
    model: str | None
    language: str | None
    prompt: str | None
    response_format: str
    temperature: float | None
    granularities: tuple[str, ...]
    stream: bool
    ignored: tuple[str, ...]

    @property
    def words(self) -> bool:
        return "word" in self.granularities


def _text(form: FormData, name: str) -> str | None:
    values = form.getlist(name)
    if not values:
        return None
    if len(values) > 1:
        raise invalid_request(f"`{name}` was sent {len(values)} times; send it once", param=name)
    value = values[0]
    if not isinstance(value, str):
        raise invalid_request(f"`{name}` must be a text field, not a file", param=name)
    return value


async def _file(form: FormData) -> tuple[str, bytes]:
    files = form.getlist("file")
    if not files:
        raise invalid_request("the audio file is missing: send it in the `file` field", param="file")
    if len(files) > 1:
        raise invalid_request("send one audio file in `file`", param="file")
    upload = files[0]
    if not isinstance(upload, UploadFile):
        raise invalid_request("`file` must be a file upload (a form field with a filename), not text", param="file")
    if upload.size is not None and upload.size > FILE_LIMIT:
        raise too_large(f"the file ({upload.size} bytes)")
    data = await upload.read(FILE_LIMIT + 1)
    if len(data) > FILE_LIMIT:
        raise too_large("the file")
    if not data:
        raise invalid_request("the audio file is empty", param="file")
    return upload.filename or "audio", data


def _temperature(text: str | None) -> float | None:
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise invalid_request(f"`temperature` must be a number between 0 and 1, not {text!r}",
                              param="temperature") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise invalid_request(f"`temperature` must be between 0 and 1, not {text}", param="temperature")
    return value


def _language(text: str | None) -> str | None:
    if text is None or text == "":
        return None
    code = text.strip().lower()
    if code not in LANGUAGE_NAMES:
        raise invalid_request(f"`language` {text!r} is not a language Whisper knows: give an ISO-639-1 code such "
                              "as en, fr, de, es, ja or zh", param="language")
    return code


def _boolean(text: str | None, name: str) -> bool:
    if text is None or text == "":
        return False
    value = text.strip().lower()
    if value not in ("true", "false", "1", "0"):
        raise invalid_request(f"`{name}` must be true or false, not {text!r}", param=name)
    return value in ("true", "1")


def _granularities(form: FormData) -> tuple[str, ...]:
    values = [*form.getlist("timestamp_granularities[]"), *form.getlist("timestamp_granularities")]
    out = []
    for value in values:
        if not isinstance(value, str):
            raise invalid_request("`timestamp_granularities[]` must be a text field, not a file",
                                  param="timestamp_granularities")
        if value not in GRANULARITIES:
            raise invalid_request(f"`timestamp_granularities[]` takes word or segment, not {value!r}",
                                  param="timestamp_granularities")
        out.append(value)
    return tuple(dict.fromkeys(out))


async def parse_transcription_form(form: FormData, *, translation: bool) -> TranscriptionForm:
    response_format = _text(form, "response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        raise invalid_request(f"`response_format` {response_format!r} is not one of {', '.join(RESPONSE_FORMATS)}",
                              param="response_format")
    granularities = _granularities(form)
    if granularities and response_format != "verbose_json":
        raise invalid_request("`timestamp_granularities[]` needs `response_format` verbose_json",
                              param="timestamp_granularities")
    stream = _boolean(_text(form, "stream"), "stream")
    if stream and response_format not in STREAM_FORMATS:
        raise invalid_request(f"`stream` true sends transcript.text.delta events: use response_format json or "
                              f"text, not {response_format}", param="stream")
    model = _text(form, "model")
    prompt = _text(form, "prompt")
    temperature = _temperature(_text(form, "temperature"))
    language = _language(_text(form, "language"))
    filename, data = await _file(form)
    ignored = tuple(sorted(key for key in set(form.keys()) if key not in KNOWN))
    return TranscriptionForm(filename=filename, data=data, model=model or None, language=language,
                             prompt=prompt or None, response_format=response_format, temperature=temperature,
                             granularities=granularities, stream=stream, ignored=ignored)
