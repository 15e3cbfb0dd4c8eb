"""Speech to text on a real model: sentences spoken by the piper-joe voice are sent to
/v1/audio/transcriptions of a server started with --stt-model whisper-tiny.en, in
every container format, response format and as a stream; and every bad request is a
4xx before any work."""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import re
import time

import numpy as np
import pytest

from tests.audio_clips import ENCODINGS, SENTENCES, Speaker, encode, wav_bytes, word_error_rate
from tests.server_process import ServerProcess

REFERENCE = " ".join(SENTENCES)
PAD_S = 0.5


def _wait_for_audio(proc: ServerProcess, wav: bytes) -> None:
    deadline = time.monotonic() + 120
    with proc.client() as client:
        while time.monotonic() < deadline:
            r = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", wav, "audio/wav")})
            if r.status_code != 503:
                return
            time.sleep(0.3)
    raise TimeoutError(proc.log())


@pytest.fixture(scope="module")
def speaker():
    return Speaker()


@pytest.fixture(scope="module")
def clip(speaker):
    """The four sentences with half a second of silence either side: int16 samples."""
    samples = speaker.samples(REFERENCE)
    pad = np.zeros(int(speaker.rate * PAD_S), dtype=np.int16)
    return np.concatenate([pad, samples, pad])


@pytest.fixture(scope="module")
def wav(clip, speaker):
    return wav_bytes(clip, speaker.rate)


@pytest.fixture(scope="module")
def stt(wav):
    proc = ServerProcess("-c", "2048", "-np", "1", "--stt-model", "whisper-tiny.en", "--audio-queue-depth", "1")
    try:
        proc.wait_ready()
        _wait_for_audio(proc, wav)
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def client(stt):
    with stt.client(timeout=300) as c:
        yield c


def _post(client, data: bytes | None = None, name: str = "a.wav", path: str = "/v1/audio/transcriptions", **fields):
    files = {"file": (name, data, "application/octet-stream")} if data is not None else None
    return client.post(path, files=files, data=fields)


def _error(r, status: int, *needles: str) -> dict:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    for needle in needles:
        assert needle in error["message"] or needle == error["type"] or needle == error.get("code"), error
    return error


# --- transcripts ---------------------------------------------------------------------------


def test_a_wav_transcribes_within_the_word_error_rate(client, wav):
    r = _post(client, wav, model="whisper-1")
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"text"}
    assert word_error_rate(REFERENCE, r.json()["text"]) <= 0.15, r.json()["text"]


@pytest.mark.parametrize("fmt", list(ENCODINGS))
def test_every_container_transcribes_the_same(client, clip, speaker, wav, fmt):
    baseline = _post(client, wav).json()["text"]
    r = _post(client, encode(clip, speaker.rate, fmt), name=f"a.{fmt}")
    assert r.status_code == 200, r.text
    text = r.json()["text"]
    assert word_error_rate(REFERENCE, text) <= 0.15, text
    assert word_error_rate(baseline, text) <= 0.1, (baseline, text)


def test_text_format_is_the_plain_transcript(client, wav):
    r = _post(client, wav, response_format="text")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.text.endswith("\n") and word_error_rate(REFERENCE, r.text) <= 0.15


_CUE_TIME = re.compile(r"^(\d{2}):(\d{2}):(\d{2})([,.])(\d{3}) --> (\d{2}):(\d{2}):(\d{2})([,.])(\d{3})$")


def _seconds(h, m, s, ms) -> float:
    return int(h) * 3600 + int(m) * 60 + int(s) + int(ms) / 1000


def parse_subtitles(text: str, kind: str) -> list[tuple[float, float, str]]:
    """A strict SRT / WebVTT reader: numbered cues (SRT) or a WEBVTT header (VTT), one
    timing line per cue with the format's decimal mark, text, a blank line between cues."""
    separator = "," if kind == "srt" else "."
    blocks = text.strip("\n").split("\n\n")
    if kind == "vtt":
        assert blocks[0] == "WEBVTT", blocks[0]
        blocks = blocks[1:]
    cues = []
    for number, block in enumerate(blocks, 1):
        lines = block.split("\n")
        if kind == "srt":
            assert lines[0] == str(number), block
            lines = lines[1:]
        match = _CUE_TIME.match(lines[0])
        assert match and match[4] == separator and match[9] == separator, lines[0]
        start, end = _seconds(*match.group(1, 2, 3, 5)), _seconds(*match.group(6, 7, 8, 10))
        assert len(lines) >= 2 and all(line.strip() for line in lines[1:]), block
        cues.append((start, end, " ".join(lines[1:])))
    return cues


@pytest.mark.parametrize("kind, media", [("srt", "application/x-subrip"), ("vtt", "text/vtt")])
def test_subtitles_parse_with_monotonic_times_covering_the_speech(client, wav, clip, speaker, kind, media):
    r = _post(client, wav, response_format=kind)
    assert r.status_code == 200 and r.headers["content-type"].startswith(media), r.text
    cues = parse_subtitles(r.text, kind)
    assert cues
    duration = len(clip) / speaker.rate
    for (start, end, _), (next_start, _, _) in zip(cues, cues[1:] + [(duration + 1, 0, "")]):
        assert 0 <= start < end <= next_start, cues
    assert cues[0][0] <= PAD_S + 1.0 and cues[-1][1] >= duration - PAD_S - 1.0, (cues, duration)
    assert cues[-1][1] <= duration + 0.5
    assert word_error_rate(REFERENCE, " ".join(c[2] for c in cues)) <= 0.15


def test_verbose_json_has_segments_and_words(client, wav, clip, speaker):
    r = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", wav)},
                    data={"response_format": "verbose_json", "timestamp_granularities[]": ["word", "segment"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["task"] == "transcribe" and body["language"] == "english"
    assert abs(body["duration"] - len(clip) / speaker.rate) < 0.05
    assert word_error_rate(REFERENCE, body["text"]) <= 0.15
    keys = {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob", "compression_ratio",
            "no_speech_prob"}
    assert body["segments"] and all(set(s) == keys for s in body["segments"])
    assert [s["id"] for s in body["segments"]] == list(range(len(body["segments"])))
    assert all(isinstance(t, int) for s in body["segments"] for t in s["tokens"])
    spoken = body["words"]
    assert word_error_rate(REFERENCE, " ".join(w["word"] for w in spoken)) <= 0.15
    assert all(set(w) == {"word", "start", "end"} and w["start"] <= w["end"] for w in spoken)
    assert all(a["start"] <= b["start"] for a, b in itertools.pairwise(spoken))


def test_verbose_json_without_word_granularity_has_no_words(client, wav):
    body = _post(client, wav, response_format="verbose_json").json()
    assert "words" not in body and body["segments"]


def test_stream_sends_deltas_then_the_whole_text(client, wav):
    with client.stream("POST", "/v1/audio/transcriptions", files={"file": ("a.wav", wav)},
                       data={"stream": "true"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert [e["type"] for e in events[:-1]] == ["transcript.text.delta"] * (len(events) - 1)
    assert len(events) >= 2 and events[-1]["type"] == "transcript.text.done"
    assert "".join(e["delta"] for e in events[:-1]).strip() == events[-1]["text"]
    assert word_error_rate(REFERENCE, events[-1]["text"]) <= 0.15


def test_the_openai_sdk_works_unchanged(stt, wav):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{stt.base_url}/v1", api_key="none", timeout=300)
    plain = client.audio.transcriptions.create(model="whisper-1", file=("speech.wav", wav))
    assert word_error_rate(REFERENCE, plain.text) <= 0.15
    verbose = client.audio.transcriptions.create(model="whisper-1", file=("speech.wav", wav),
                                                 response_format="verbose_json", timestamp_granularities=["word"],
                                                 language="en", temperature=0.0, prompt="Foxes and dogs.")
    assert verbose.words and word_error_rate(REFERENCE, verbose.text) <= 0.15
    srt = client.audio.transcriptions.create(model="whisper-1", file=("speech.wav", wav), response_format="srt")
    assert parse_subtitles(srt, "srt")


def test_the_alias_without_v1_and_the_served_name(client, wav):
    r = _post(client, wav, path="/audio/transcriptions", model="whisper-tiny.en")
    assert r.status_code == 200 and word_error_rate(REFERENCE, r.json()["text"]) <= 0.15


def test_an_english_only_model_refuses_to_translate(client, wav):
    for path in ("/v1/audio/translations", "/audio/translations"):
        error = _error(_post(client, wav, path=path), 400, "whisper-base")
        assert "whisper-tiny.en" in error["message"] and "translate" in error["message"]
    _error(_post(client, wav, language="fr"), 400, "English only")


# --- bad input -------------------------------------------------------------------------------


def test_no_file_is_400(client):
    _error(client.post("/v1/audio/transcriptions", data={"model": "whisper-1"}, files={"x": ("x", b"1")}), 400,
           "`file`")


def test_a_text_file_field_is_400(client):
    r = client.post("/v1/audio/transcriptions", files={"model": (None, "whisper-1"), "file": (None, "hello")})
    _error(r, 400, "file upload")


def test_an_empty_file_is_400(client):
    _error(_post(client, b""), 400, "empty")


@pytest.mark.parametrize("data", [b"this is not audio at all" * 100, b"RIFF\x00\x00\x00\x00WAVEfmt garbage"])
def test_not_audio_is_400_with_a_clear_message(client, data):
    _error(_post(client, data, name="a.mp3"), 400, "could not decode the audio file", "invalid_audio")


def test_audio_longer_than_the_limit_is_400_before_it_is_decoded(client):
    """32 KB of WAV at a sample rate of 1 Hz claim 4.4 hours: refused as the file is read
    (it took a minute and 7 GB of memory, giving back 775 MB of it, and answered 200)."""
    import struct

    pcm = b"\0\0" * 16_000
    wav = (b"RIFF" + struct.pack("<I", 36 + len(pcm)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 1, 2, 2, 16)
           + b"data" + struct.pack("<I", len(pcm)) + pcm)
    started = time.monotonic()
    _error(_post(client, wav), 400, "longer than 7200 seconds", "audio_too_long")
    assert time.monotonic() - started < 10
    assert client.get("/health").status_code == 200


def test_a_json_body_is_400(client):
    _error(client.post("/v1/audio/transcriptions", json={"file": "x"}), 400, "multipart/form-data")


@pytest.mark.parametrize("field, value, needle", [
    ("response_format", "mp4", "response_format"),
    ("temperature", "2", "temperature"),
    ("temperature", "warm", "temperature"),
    ("language", "klingon", "language"),
    ("stream", "maybe", "stream"),
    ("timestamp_granularities[]", "sentence", "timestamp_granularities"),
])
def test_bad_fields_are_400(client, wav, field, value, needle):
    _error(_post(client, wav, **{field: value}), 400, needle)


def test_a_granularity_sent_as_a_file_is_400_without_the_uploads_internals(client, wav):
    r = client.post("/v1/audio/transcriptions", data={"response_format": "verbose_json"},
                    files=[("file", ("a.wav", wav, "audio/wav")), ("timestamp_granularities[]", ("g.txt", b"word"))])
    error = _error(r, 400, "not a file")
    assert "UploadFile" not in error["message"]  # it was the upload's repr, its headers included


def test_word_granularity_needs_verbose_json_and_stream_needs_json_or_text(client, wav):
    _error(_post(client, wav, **{"timestamp_granularities[]": "word"}), 400, "verbose_json")
    _error(_post(client, wav, stream="true", response_format="srt"), 400, "stream")


def test_an_upload_over_25_mib_is_413(stt):
    big = b"\x00" * (26 * 1024 * 1024)
    with stt.client(timeout=120) as client:
        r = _post(client, big)
        assert r.status_code == 413, r.text
        assert r.json()["error"]["code"] == "request_too_large"

        def chunked():  # no Content-Length: the limit is checked as the bytes arrive
            boundary = b"--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"
            yield boundary
            for _ in range(26):
                yield b"\x00" * (1024 * 1024)
            yield b"\r\n--xyz--\r\n"

        r = client.post("/v1/audio/transcriptions", content=chunked(),
                        headers={"content-type": "multipart/form-data; boundary=xyz"})
        assert r.status_code == 413, r.text


def test_beyond_the_queue_depth_is_503(stt, speaker):
    """--audio-queue-depth 1: one runs, one waits, the others are refused at once."""
    long_wav = speaker.wav(" ".join(SENTENCES * 3))

    def send(_):
        with stt.client(timeout=300) as client:
            return _post(client, long_wav)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(send, range(4)))
    statuses = sorted(r.status_code for r in results)
    assert statuses.count(200) >= 2 and 503 in statuses, statuses
    busy = next(r for r in results if r.status_code == 503)
    assert busy.json()["error"]["type"] == "server_busy" and "--audio-queue-depth" in busy.json()["error"]["message"]


def test_a_full_queue_refuses_an_upload_before_decoding_it(stt, speaker):
    """With every place taken, an upload is a 503 at once: a flood is turned away without
    each upload being decoded first (bytes that are not audio were a 400 after their
    decode even then, so the check came after the work it exists to spare)."""
    long_wav = speaker.wav(" ".join(SENTENCES * 3))

    def send(_):
        with stt.client(timeout=300) as client:
            return _post(client, long_wav)

    refusals = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool, stt.client() as client:
        running = [pool.submit(send, i) for i in range(2)]  # one runs, one waits: the queue is full
        while not all(f.done() for f in running) and not refusals:
            r = client.post("/v1/audio/transcriptions", files={"file": ("x.wav", b"not audio at all", "audio/wav")})
            if r.status_code == 503:
                refusals.append(r)
            else:
                assert r.status_code == 400, r.text
                time.sleep(0.05)
        results = [f.result() for f in running]
    assert [r.status_code for r in results] == [200, 200]
    assert refusals and "--audio-queue-depth" in refusals[0].json()["error"]["message"]


def test_a_client_that_leaves_stops_its_transcription(stt, client, speaker, wav):
    """A recording of two 30-second windows whose client gives up after a second stops
    at the end of the window being decoded (one worker, queue depth 1): the next
    request waits for that window, not for the whole recording."""
    import httpx

    long_wav = speaker.wav(" ".join(SENTENCES * 4))
    started = time.monotonic()
    assert _post(client, wav).status_code == 200
    own = time.monotonic() - started  # the short request alone
    started = time.monotonic()
    assert _post(client, long_wav).status_code == 200
    whole = time.monotonic() - started
    with stt.client(timeout=1.0) as leaving, pytest.raises(httpx.TimeoutException):
        _post(leaving, long_wav)
    started = time.monotonic()
    after = _post(client, wav)
    behind = time.monotonic() - started
    assert after.status_code == 200, after.text
    assert word_error_rate(REFERENCE, after.json()["text"]) <= 0.15, after.json()["text"]
    # not cancelled, it would wait for the rest of the whole recording (all but the second the client
    # stayed) and then run: at least whole - 1 + own. Cancelled, for the window being decoded, then its own
    # (0.7-0.8 of the whole here, the window's share of the recording's fixed costs included)
    assert behind < 0.9 * whole + own - 1.0, (whole, own, behind)


def test_uploads_whose_clients_left_before_their_turn_are_not_decoded(stt, client, clip, speaker, wav):
    """Uploads decode one at a time. Five clients that send twenty minutes of MP3 each and
    leave hold the next request up for the one decode already running at most: not for
    five decodes, nor for the transcription of one that started before its cancel landed
    (the whole recording's voice detection: most of 20 s here)."""
    import httpx

    long_mp3 = encode(np.tile(clip, 80), speaker.rate, "mp3")
    started = time.monotonic()
    _error(_post(client, long_mp3, language="fr"), 400, "English only")  # refused after its decode
    decode = time.monotonic() - started

    def leave(_):
        with stt.client(timeout=0.5) as leaving, pytest.raises(httpx.TimeoutException):
            _post(leaving, long_mp3)

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        list(pool.map(leave, range(5)))
    started = time.monotonic()
    assert _post(client, wav).status_code == 200
    behind = time.monotonic() - started
    assert behind < 2 * decode + 1.0, (decode, behind)


def test_a_server_without_an_stt_model_answers_501_after_checking_the_request(http, wav):
    error = _error(_post(http, wav), 501, "not_implemented", "--stt-model")
    assert error["type"] == "not_implemented"
    _error(_post(http, wav, path="/v1/audio/translations"), 501, "not_implemented")
    _error(_post(http, None, model="whisper-1"), 400, "`file`")
    _error(_post(http, b"not audio" * 10), 400, "invalid_audio")
    _error(_post(http, wav, response_format="docx"), 400, "response_format")


def test_a_request_past_the_timeout_is_504(wav):
    proc = ServerProcess("-c", "1024", "-np", "1", "--stt-model", "whisper-tiny.en",
                         "--audio-request-timeout-secs", "0.01")
    try:
        proc.wait_ready()
        deadline = time.monotonic() + 120
        with proc.client(timeout=120) as client:
            while (r := _post(client, wav)).status_code == 503 and time.monotonic() < deadline:
                time.sleep(0.3)
            _error(r, 504, "timeout_error", "--audio-request-timeout-secs")
            assert client.get("/health").status_code == 200
    finally:
        proc.stop()


def test_with_config_the_stt_role_serves_and_other_model_names_are_404(tmp_path, wav):
    config = tmp_path / "fleet.yaml"
    config.write_text("models:\n  smol:\n    path: smollm2-135m-instruct\nserver:\n  stt: whisper-tiny.en\n")
    proc = ServerProcess("--config", str(config), model=None)
    try:
        proc.wait_ready()
        _wait_for_audio(proc, wav)
        with proc.client(timeout=300) as client:
            for name in ("whisper-1", "whisper-tiny.en", ""):
                r = _post(client, wav, model=name)
                assert r.status_code == 200 and word_error_rate(REFERENCE, r.json()["text"]) <= 0.15, r.text
            error = _error(_post(client, wav, model="smol"), 404, "model_not_found")
            assert "smol" in error["message"]
    finally:
        proc.stop()
