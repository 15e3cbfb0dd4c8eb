"""POST /v1/audio/transcriptions and /v1/audio/translations (and the same without
/v1): OpenAI's multipart form in, a transcript out in json, text, srt, vtt or
verbose_json, or as transcript.text.delta / transcript.text.done events with
`stream` true. Translations turn any language the model knows into English."""

from __future__ import annotations

import asyncio
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from mlxcel.api.audio.transcript_formats import to_srt, to_verbose, to_vtt
from mlxcel.api.audio.transcription_form import TranscriptionForm, parse_transcription_form
from mlxcel.api.audio.upload import read_form
from mlxcel.http.errors import as_api_error, invalid_request
from mlxcel.http.fleet_opening import check_service_model
from mlxcel.http.ignored_fields import warn_ignored_fields
from mlxcel.http.request_context import ClientLeft, run_while_connected
from mlxcel.http.sse import EventStreamResponse, sse_data
from mlxcel.speech.decode import decode_in_background
from mlxcel.speech.errors import AudioModelMissing
from mlxcel.speech.stt_host import WHISPER_ALIAS, SttHost, Transcription
from mlxcel.speech.transcript import AudioInfo, TranscribeOptions, Transcript

router = APIRouter()
ROUTES = "/v1/audio/transcriptions and /v1/audio/translations"


async def _transcribe(request: Request, task: str) -> Response:
    form = await read_form(request)
    fields = await parse_transcription_form(form, translation=task == "translate")
    warn_ignored_fields({k: None for k in fields.ignored}, (), f"audio-{uuid.uuid4().hex[:8]}")
    host: SttHost | None = getattr(request.app.state, "stt_host", None)
    if host is not None:
        check_service_model(request, fields.model, host.model_id, WHISPER_ALIAS, host.model)
        host.check_room()  # a full queue refuses before the upload is decoded
    # not audio, or too long: 400 even without a model. One upload decodes at a time: a client that
    # leaves while its upload waits for the decoder (or is decoded) is neither decoded nor transcribed
    samples = await run_while_connected(
        request, decode_in_background(fields.data, request.app.state.config.stt_max_seconds))
    if host is None:
        raise AudioModelMissing("stt", "--stt-model", ROUTES)
    host.require_ready()
    _check_model_can(host, task, fields)
    options = TranscribeOptions(task=task, language=fields.language, prompt=fields.prompt,
                                temperature=fields.temperature, word_timestamps=fields.words)
    transcription = host.submit(samples, options)
    if fields.stream:
        return EventStreamResponse(_stream(transcription), on_close=transcription.cancel)
    transcript = await _collect(request, transcription, task)
    return _render(transcript, fields)


def _check_model_can(host: SttHost, task: str, fields: TranscriptionForm) -> None:
    if host.multilingual:
        return
    if task == "translate":
        raise invalid_request(f"the speech-to-text model {host.model_id} is English-only and cannot translate: "
                              "serve a multilingual model such as whisper-base (--stt-model whisper-base)",
                              param="model")
    if fields.language not in (None, "en"):
        raise invalid_request(f"the speech-to-text model {host.model_id} transcribes English only, not "
                              f"{fields.language!r}: serve a multilingual model such as whisper-base",
                              param="language")


async def _collect(request: Request, transcription: Transcription, task: str) -> Transcript:
    async def run() -> Transcript:
        info, segments = None, []
        async for event in transcription.events():
            if isinstance(event, AudioInfo):
                info = event
            else:
                segments.append(event)
        return Transcript(task, info, segments)

    try:
        return await run_while_connected(request, run())
    except (asyncio.CancelledError, ClientLeft):  # a client that leaves stops the job
        transcription.cancel()
        raise


def _render(transcript: Transcript, fields: TranscriptionForm) -> Response:
    kind = fields.response_format
    if kind == "json":
        return JSONResponse({"text": transcript.text})
    if kind == "verbose_json":
        return JSONResponse(to_verbose(transcript, fields.words))
    if kind == "text":
        return PlainTextResponse(transcript.text + "\n")
    if kind == "srt":
        return PlainTextResponse(to_srt(transcript), media_type="application/x-subrip")
    return PlainTextResponse(to_vtt(transcript), media_type="text/vtt")


async def _stream(transcription: Transcription):
    """A delta per finished segment, then the whole text (OpenAI's event shapes); an
    error after the first event (a timeout) is one error event."""
    parts = []
    try:
        async for event in transcription.events():
            if isinstance(event, AudioInfo) or not event.text:
                continue
            delta = event.text if parts else event.text.lstrip()
            parts.append(delta)
            yield sse_data({"type": "transcript.text.delta", "delta": delta})
    except Exception as exc:  # noqa: BLE001 - the headers are out: the error travels as an event
        yield sse_data(as_api_error(exc).body())
        return
    yield sse_data({"type": "transcript.text.done", "text": "".join(parts).strip()})


@router.post("/v1/audio/transcriptions")
@router.post("/audio/transcriptions")
async def transcriptions(request: Request):
    return await _transcribe(request, "transcribe")


@router.post("/v1/audio/translations")
@router.post("/audio/translations")
async def translations(request: Request):
    return await _transcribe(request, "translate")
