"""POST /v1/audio/speech (and /audio/speech): OpenAI's text to speech on a piper voice.

The text is split into sentences, synthesised in order by the speech worker, and each
sentence's audio is sent as soon as it is made (chunked transfer; `stream_format:
"sse"` sends OpenAI's `speech.audio.delta` / `speech.audio.done` events instead), so
playback can start before the whole text is spoken. The response waits for the first
sentence before its headers, so a full queue (503), a timeout (504) or a failure
before any audio is still an HTTP status. A client that leaves cancels the sentences
not yet spoken.

`voice`: the voice's speakers (a single-speaker voice: its own name), and OpenAI's
voice names (alloy, ash, ballad, coral, echo, fable, nova, onyx, sage, shimmer, verse),
which all speak with the default speaker. `model`: tts-1, tts-1-hd, gpt-4o-mini-tts or
the speech model's own name (any name without --config). `pcm` is raw 16-bit
little-endian mono at the voice's own rate (22,050 Hz for piper's medium voices, not
OpenAI's 24 kHz): the X-Sample-Rate header says it."""

from __future__ import annotations

import base64
import contextlib
import json
import uuid

from fastapi import APIRouter, Request

from mlxcel.api.audio.byte_stream import ByteStreamResponse
from mlxcel.api.audio.speech_wire import HONORED, IGNORED, OPENAI_TTS_MODELS, SpeechRequest
from mlxcel.http.fleet_opening import check_service_model
from mlxcel.http.ignored_fields import warn_ignored_fields
from mlxcel.http.json_body import read_model
from mlxcel.http.request_context import run_while_connected
from mlxcel.http.sse import EventStreamResponse, keepalive_seconds, sse_data
from mlxcel.speech.sentences import split_sentences
from mlxcel.speech.tts_encode import DEFAULT_FORMAT, audio_format
from mlxcel.speech.tts_host import SpeechHost
from mlxcel.speech.tts_voice import SpeechSettings
from mlxcel.turn.errors import InvalidRequest, NotSupported

router = APIRouter()


@router.post("/v1/audio/speech")
@router.post("/audio/speech")
async def speech(request: Request):
    data, body = await read_model(request, SpeechRequest)
    text = body.text()
    fmt = audio_format(body.response_format or DEFAULT_FORMAT)
    stream_kind = body.stream_kind()
    host: SpeechHost | None = getattr(request.app.state, "tts_host", None)
    if host is None:
        raise NotSupported("text to speech (tts) is not available: start the server with --tts-model",
                           code="not_implemented")
    check_service_model(request, body.model, host.model_id, host.config.tts_model, *OPENAI_TTS_MODELS)
    speaker = host.require_ready()
    settings = SpeechSettings(speaker.speaker_for(body.voice) if body.voice else None, body.speed)
    request_id = f"speech-{uuid.uuid4().hex[:16]}"
    warn_ignored_fields(data, HONORED, request_id, ignored=IGNORED)
    sentences = split_sentences(text)
    if not sentences:
        raise InvalidRequest("`input` has nothing to speak", param="input")

    job = host.submit(sentences, settings, fmt)
    chunks = host.chunks(job)
    try:
        head = await run_while_connected(request, anext(chunks, None))  # a client may leave before any audio
    except BaseException:
        await chunks.aclose()
        raise

    if stream_kind == "sse":
        return EventStreamResponse(_events(head, chunks, len(text)), on_close=job.cancel,
                                   ping_seconds=keepalive_seconds(host.config.sse_ping_interval))
    rate = fmt.rate or speaker.sample_rate  # what the encoded audio carries (Opus: 48 kHz)
    return ByteStreamResponse(_bytes(head, chunks), fmt.content_type, {"X-Sample-Rate": str(rate)},
                              on_close=job.cancel)


async def _bytes(head, chunks):
    async with contextlib.aclosing(chunks):
        if head is not None:
            yield head.data
        async for chunk in chunks:
            yield chunk.data


async def _events(head, chunks, n_chars: int):
    """OpenAI's speech stream: a delta per encoded piece (base64), then done with usage
    (characters here: a piper voice has no tokens)."""
    async with contextlib.aclosing(chunks):
        pending = [head] if head is not None else []
        while True:
            for chunk in pending:
                if chunk.data:
                    yield sse_data({"type": "speech.audio.delta", "audio": base64.b64encode(chunk.data).decode()})
            try:
                chunk = await anext(chunks, None)
            except Exception as exc:  # noqa: BLE001 - a failure mid-stream: an error event ends it
                message = getattr(exc, "message", None) or type(exc).__name__
                yield sse_data(json.dumps({"type": "error", "error": {"message": message}}))
                return
            if chunk is None:
                break
            pending = [chunk]
    usage = {"input_tokens": n_chars, "output_tokens": 0, "total_tokens": n_chars}
    yield sse_data({"type": "speech.audio.done", "usage": usage})
