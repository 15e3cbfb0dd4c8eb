"""--sleep-idle-seconds on a real server, as llama-server sleeps: after the idle time the
model's memory is freed; /health, /props, /v1/models and /metrics answer without waking
it (from what was read before it slept) and so do paths no route serves; the next
requests wake it once, however many arrive together, and answer as before; it never
sleeps under an open request; the counters go on. In router mode (--models-dir) a
sleeping model is listed `sleeping` and a request wakes it even without autoload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from mlxcel.models.catalog import CATALOG
from mlxcel.models.store import model_path
from tests.server_process import ServerProcess

pytestmark = pytest.mark.slow
PROMPT = {"prompt": "The capital of France is", "n_predict": 16, "temperature": 0, "cache_prompt": False}


def _rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _wait_sleeping(client: httpx.Client, value: bool, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while (props := client.get("/props").json())["is_sleeping"] is not value:
        assert time.monotonic() < deadline, props
        time.sleep(0.1)
    return props


def _counter(client: httpx.Client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.fixture(scope="module")
def sleepy():
    proc = ServerProcess("-c", "1024", "-np", "2", "--metrics", "--sleep-idle-seconds", "1")
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


def test_an_idle_model_sleeps_and_the_describing_routes_do_not_wake_it(sleepy):
    with sleepy.client() as client:
        before = client.post("/completion", json=PROMPT).json()
        awake_rss = _rss_mib(sleepy.process.pid)
        awake_props = client.get("/props").json()
        predicted = _counter(client, "llamacpp:tokens_predicted_total")
        props = _wait_sleeping(client, True)
        wakes = sleepy.log().count("is waking")
        time.sleep(1.5)  # past another idle period: the reads below must not wake it either
        health = client.get("/health")
        models = client.get("/v1/models").json()["data"][0]
        asleep_predicted = _counter(client, "llamacpp:tokens_predicted_total")
        unknown = client.get("/no/such/route")
        unserved = [client.post(path, json={}).status_code for path in ("/cors-proxy", "/v1/images/generations")]
        heads = [client.head(path).status_code for path in ("/health", "/props", "/v1/models")]  # as GET
        still = client.get("/props").json()
        asleep_rss = _rss_mib(sleepy.process.pid)
    assert awake_props["is_sleeping"] is False
    assert {k: v for k, v in props.items() if k != "is_sleeping"} == \
        {k: v for k, v in awake_props.items() if k != "is_sleeping"}
    assert health.status_code == 200 and health.json()["status"] == "ok" and health.json()["is_sleeping"] is True
    assert models["meta"]["n_vocab"] > 0 and models["meta"]["n_ctx"] == 512
    assert asleep_predicted == predicted >= before["tokens_predicted"]
    assert unknown.status_code == 404
    assert unserved == [403, 501]  # answered without the model: a scanner wakes nothing
    assert heads == [200, 200, 200]
    assert still["is_sleeping"] is True
    assert awake_rss - asleep_rss > 50, (awake_rss, asleep_rss)  # the weights' pages and the buffers are gone
    assert sleepy.log().count("is waking") == wakes


def test_requests_wake_it_once_and_answer_as_before(sleepy):
    with sleepy.client() as client:
        before = client.post("/completion", json=PROMPT).json()
        predicted = _counter(client, "llamacpp:tokens_predicted_total")
        _wait_sleeping(client, True)
        wakes = sleepy.log().count("is waking")

        def ask(i: int) -> dict:
            if i == 0:  # one streamed, the rest whole
                with client.stream("POST", "/completion", json={**PROMPT, "stream": True}) as response:
                    pieces = [line for line in response.iter_lines() if line.startswith("data: ")]
                return {"content": "".join(json.loads(p[6:])["content"] for p in pieces)}
            return client.post("/completion", json=PROMPT).json()

        health: list[str] = []
        done = threading.Event()

        def watch_health() -> None:  # a load balancer's probe, all through the wake
            with sleepy.client(timeout=5) as prober:
                while not done.is_set():
                    health.append(prober.get("/health").json()["status"])
                    time.sleep(0.02)

        prober = threading.Thread(target=watch_health)
        prober.start()
        try:
            with ThreadPoolExecutor(4) as pool:
                answers = list(pool.map(ask, range(4)))
        finally:
            done.set()
            prober.join()
        props = client.get("/props").json()
        after = _counter(client, "llamacpp:tokens_predicted_total")
    assert [a["content"] for a in answers] == [before["content"]] * 4
    assert sleepy.log().count("is waking") == wakes + 1
    assert props["is_sleeping"] is False
    # never "loading model" while it wakes; "no slot available" while the four fill both slots, as llama-server
    assert health and set(health) <= {"ok", "no slot available"}, health
    assert after >= predicted + 4 * before["tokens_predicted"]  # counted on from before the sleep


def test_it_never_sleeps_under_an_open_request(sleepy):
    """A request longer than the idle time runs whole, and the model stays awake throughout."""
    with sleepy.client() as client:
        client.post("/completion", json=PROMPT)  # awake
        seen: list[bool] = []
        done = threading.Event()

        def watch() -> None:
            with sleepy.client() as watcher:
                while not done.is_set():
                    seen.append(watcher.get("/props").json()["is_sleeping"])
                    time.sleep(0.1)

        thread = threading.Thread(target=watch)
        thread.start()
        started = time.monotonic()
        try:
            # read as fast as it comes: the server is busy until the last chunk arrives (a slow
            # reader was no test: the socket buffers took the whole answer, the request ended,
            # and the model could sleep, rightly, while the reader still read)
            with client.stream("POST", "/completion", json={**PROMPT, "n_predict": 400, "ignore_eos": True,
                                                            "stream": True}) as response:
                last = {}
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        last = json.loads(line[6:])
        finally:
            done.set()
            thread.join()
        took = time.monotonic() - started
    assert last["stop"] is True and last["tokens_predicted"] == 400
    assert took > 1.2, took  # longer than the idle time (1 s)
    assert seen and not any(seen), seen


def test_clients_that_leave_while_it_wakes_leave_it_able_to_sleep(sleepy):
    """Requests abandoned mid-wake (clients that time out) neither break the wake nor
    keep the model awake forever: the next request is answered, and it sleeps again."""
    with sleepy.client() as client:
        expected = client.post("/completion", json=PROMPT).json()["content"]
        _wait_sleeping(client, True)

        def abandon(_: int) -> str:
            try:
                with sleepy.client(timeout=0.05) as impatient:
                    impatient.post("/completion", json=PROMPT)
                return "answered"
            except httpx.TimeoutException:
                return "left"

        with ThreadPoolExecutor(8) as pool:
            outcomes = list(pool.map(abandon, range(8)))
        answer = client.post("/completion", json=PROMPT).json()["content"]
        _wait_sleeping(client, True)  # nothing left counted as open
    assert "left" in outcomes
    assert answer == expected


@pytest.mark.parametrize("value", ["0", "-2", "soon"])
def test_bad_idle_times_fail_in_one_line(value):
    result = subprocess.run([sys.executable, "-m", "mlxcel", "serve", "--sleep-idle-seconds", value],
                            capture_output=True, text=True, timeout=60, env=dict(os.environ))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "sleep-idle-seconds" in lines[0], result.stderr


def test_router_mode_lists_a_sleeping_model_and_a_request_wakes_it(tmp_path):
    for name in ("alpha", "beta"):
        (tmp_path / f"{name}.gguf").symlink_to(model_path(CATALOG["smollm2-135m-instruct"]))
    from tests.e2e.test_embeddings import EMBEDDING_MODEL
    proc = ServerProcess("-c", "512", "-np", "1", "--models-dir", str(tmp_path), "--no-models-autoload",
                         "--sleep-idle-seconds", "1", "--embedding-model", EMBEDDING_MODEL, model=None)
    body = {"model": "alpha", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}

    def status(client) -> str:
        row = next(m for m in client.get("/models").json()["data"] if m["id"] == "alpha")
        assert row["source"] == "models_dir" and row["can_remove"] is False
        return row["status"]["value"]

    def wait(client, *values: str) -> None:
        deadline = time.monotonic() + 60
        while status(client) not in values:
            assert time.monotonic() < deadline, status(client)
            time.sleep(0.1)

    try:
        proc.wait_ready()
        with proc.client() as client:
            refused = client.post("/v1/chat/completions", json=body)  # never loaded: no autoload
            loaded = client.post("/models/load", json={"model": "alpha"})
            # loaded, and asleep a second later: a poll held up past that second sees it asleep
            wait(client, "loaded", "sleeping")
            wait(client, "sleeping")
            woken = client.post("/v1/chat/completions", json=body)
            awake = status(client)
            wait(client, "sleeping")
            # unloading a sleeping model ends its sleep: without autoload, no request loads it again
            unloaded = client.post("/models/unload", json={"model": "alpha"})
            after_unload = status(client)
            again = client.post("/models/unload", json={"model": "alpha"})
            refused_after = client.post("/v1/chat/completions", json=body)
            # the embedding model beside the fleet sleeps on its own, and its route wakes it
            deadline = time.monotonic() + 60
            while "is asleep" not in (_last(proc.log(), "embedding model ") or ""):
                assert time.monotonic() < deadline, proc.log()[-2000:]
                time.sleep(0.1)
            embedded = client.post("/v1/embeddings", json={"input": "a dog"})
            embedding_wakes = sum("embedding model" in line and "is waking" in line for line in proc.log().splitlines())
    finally:
        proc.stop()
    assert embedded.status_code == 200, embedded.text
    assert embedding_wakes == 1
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "model_not_loaded"
    assert loaded.status_code == 200
    assert woken.status_code == 200, woken.text
    assert woken.json()["choices"][0]["message"]["content"]
    assert awake == "loaded"
    assert unloaded.status_code == 200 and unloaded.json() == {"success": True}
    assert after_unload == "unloaded"
    assert again.status_code == 400 and again.json()["error"]["message"] == "model is not running"
    assert refused_after.status_code == 400 and refused_after.json()["error"]["code"] == "model_not_loaded"


def _embedding_server():
    from tests.e2e.test_embeddings import EMBEDDING_MODEL
    return ServerProcess("--embedding", "--sleep-idle-seconds", "1", model=EMBEDDING_MODEL), \
        ("/v1/embeddings", {"input": ["a dog runs in the park", "the sun"]}), \
        lambda r: [(d["index"], d["embedding"]) for d in r.json()["data"]]


def _reranking_server(tmp_path):
    from tests.fixtures.rerank_model import write_rerank_model
    path = write_rerank_model(tmp_path / "xenc.gguf")
    return ServerProcess("--reranking", "--sleep-idle-seconds", "1", model=str(path)), \
        ("/v1/rerank", {"query": "where is the dog", "documents": ["a dog in the park", "the sun"]}), \
        lambda r: [(d["index"], [d["relevance_score"]]) for d in r.json()["results"]]


@pytest.mark.parametrize("make", [lambda tmp: _embedding_server(), _reranking_server], ids=["embedding", "reranking"])
def test_an_embedding_or_reranking_server_sleeps_and_wakes_with_the_same_answers(make, tmp_path):
    """llama-server's --embedding and --reranking modes: their model is the one that sleeps."""
    proc, (path, body), answer = make(tmp_path)
    try:
        proc.wait_ready()
        with proc.client() as client:
            before = client.post(path, json=body)
            awake_props, awake_models = client.get("/props").json(), client.get("/v1/models").json()
            _wait_sleeping(client, True)
            health, models = client.get("/health"), client.get("/v1/models").json()
            with ThreadPoolExecutor(3) as pool:
                after = list(pool.map(lambda _: client.post(path, json=body), range(3)))
            props = client.get("/props").json()
        log = proc.log()
    finally:
        proc.stop()
    assert before.status_code == 200 and awake_props["is_sleeping"] is False
    assert health.status_code == 200 and health.json()["is_sleeping"] is True
    assert models == awake_models  # described as loaded, from before it slept
    assert all(r.status_code == 200 for r in after), [r.text for r in after]
    # the same within float32's last bits: the three requests after the wake are batched
    # together, and llama.cpp's kernels round by batch shape (1.5e-8 seen), asleep or not
    expected = answer(before)
    for r in after:
        got = answer(r)
        assert [index for index, _ in got] == [index for index, _ in expected]
        assert all(values == pytest.approx(want, abs=1e-6) for (_, values), (_, want) in zip(got, expected))
    assert props["is_sleeping"] is False
    assert log.count("is waking") == 1


def _props_until(client: httpx.Client, done, between=lambda: None, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while not done(props := client.get("/props").json()):
        assert time.monotonic() < deadline, props
        between()
        time.sleep(0.2)
    return props


def test_models_beside_the_chat_model_sleep_on_their_own_clocks(tmp_path):
    """--embedding-model and --rerank-model beside the chat model: each sleeps when its own
    routes are idle. Embedding traffic keeps the embedding model awake and nothing else;
    a request to one wakes that one alone, and every model answers as before its sleep."""
    from tests.e2e.test_embeddings import EMBEDDING_MODEL
    from tests.fixtures.rerank_model import write_rerank_model
    xenc = write_rerank_model(tmp_path / "xenc.gguf")
    proc = ServerProcess("-c", "1024", "-np", "1", "--embedding-model", EMBEDDING_MODEL, "--rerank-model", str(xenc),
                         "--sleep-idle-seconds", "1")
    embed = {"input": ["a dog runs in the park", "the sun"]}
    rank = {"query": "where is the dog", "documents": ["a dog in the park", "the sun"]}

    def vectors(client: httpx.Client) -> list:
        answer = client.post("/v1/embeddings", json=embed)
        assert answer.status_code == 200, answer.text
        return [row["embedding"] for row in answer.json()["data"]]

    try:
        proc.wait_ready()
        with proc.client() as client:
            first_vectors, first_ranks = vectors(client), client.post("/v1/rerank", json=rank).json()["results"]
            awake_models = client.get("/v1/models").json()
            # embeddings every 0.2 s: the chat model and the reranker fall asleep, the embedding model does not
            chat_asleep = _props_until(client, lambda p: p["is_sleeping"] and p["rerank"]["is_sleeping"],
                                       between=lambda: vectors(client))
            all_asleep = _props_until(client, lambda p: p["embedding_model"]["is_sleeping"])
            # on a slow host a model may fall asleep before the first requests reach it: its
            # wakes are counted from here, where all three sleep
            asleep_at = len(proc.log())
            health, models = client.get("/health"), client.get("/v1/models").json()
            vectors_after = vectors(client)
            after_embedding = client.get("/props").json()
            ranks_after = client.post("/v1/rerank", json=rank).json()["results"]
            after_rerank = client.get("/props").json()
            chat = client.post("/completion", json=PROMPT)
            after_chat = client.get("/props").json()
        log = proc.log()
    finally:
        proc.stop()
    assert chat_asleep["embedding_model"]["is_sleeping"] is False
    assert all_asleep["is_sleeping"] is True and all_asleep["rerank"]["is_sleeping"] is True
    assert all_asleep["embedding_model"]["n_embd"] == 384  # as read before it slept
    assert health.status_code == 200 and health.json()["is_sleeping"] is True
    assert health.json()["model"] == awake_models["data"][0]["id"]  # the chat model's health, not a worker's
    assert models["data"][1:] == awake_models["data"][1:]  # the embedding model and reranker, as before they slept
    assert models["data"][0]["meta"] == awake_models["data"][0]["meta"]
    assert np.allclose(vectors_after, first_vectors, atol=1e-5)
    assert after_embedding["is_sleeping"] is True and after_embedding["rerank"]["is_sleeping"] is True
    assert after_embedding["embedding_model"]["is_sleeping"] is False
    assert [(r["index"], r["relevance_score"]) for r in ranks_after] == \
        [(r["index"], pytest.approx(r["relevance_score"], abs=1e-5)) for r in first_ranks]
    assert after_rerank["is_sleeping"] is True and after_rerank["rerank"]["is_sleeping"] is False
    assert chat.status_code == 200 and after_chat["is_sleeping"] is False
    waking = [line for line in log[asleep_at:].splitlines() if "is waking" in line]
    assert sum("embedding model" in line for line in waking) == 1, waking
    assert sum("rerank model" in line for line in waking) == 1
    assert len(waking) == 3, waking  # and the chat model once


def test_speech_models_sleep_on_their_own_and_a_request_wakes_one(tmp_path):
    """--stt-model and --tts-model beside the chat model: each frees its model when its routes
    are idle; a transcription wakes the Whisper model alone, a speech request the voice alone,
    and the same audio is heard as the same words across the sleep."""
    from tests.audio_clips import SENTENCES, word_error_rate
    proc = ServerProcess("-c", "1024", "-np", "1", "--stt-model", "whisper-tiny.en", "--tts-model", "piper-joe",
                         "--sleep-idle-seconds", "1")

    def speak(client: httpx.Client) -> bytes:
        answer = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": SENTENCES[0]})
        assert answer.status_code == 200, answer.text
        return answer.content

    def hear(client: httpx.Client, audio: bytes) -> str:
        answer = client.post("/v1/audio/transcriptions", files={"file": ("speech.wav", audio)},
                             data={"model": "whisper-1"})
        assert answer.status_code == 200, answer.text
        return answer.json()["text"]

    def asleep(*kinds: str) -> None:
        deadline = time.monotonic() + 60
        while not all("is asleep" in (_last(proc.log(), f"{kind} model ") or "") for kind in kinds):
            assert time.monotonic() < deadline, proc.log()[-2000:]
            time.sleep(0.2)

    try:
        proc.wait_ready()
        with proc.client(timeout=300) as client:
            audio = speak(client)
            heard = hear(client, audio)
            asleep("speech-to-text", "text-to-speech")
            _wait_sleeping(client, True)
            health = client.get("/health")
            mark = len(proc.log())
            heard_after = hear(client, audio)
            chat_after_hearing = client.get("/props").json()["is_sleeping"]
            hearing_log, mark = proc.log()[mark:], len(proc.log())
            spoken_after = speak(client)
            chat_after_speaking = client.get("/props").json()["is_sleeping"]
            speaking_log = proc.log()[mark:]
            heard_spoken = hear(client, spoken_after)
    finally:
        proc.stop()
    assert health.status_code == 200 and health.json()["is_sleeping"] is True
    assert heard_after == heard and word_error_rate(SENTENCES[0], heard) <= 0.2, heard
    assert chat_after_hearing is True and chat_after_speaking is True  # the chat model slept on
    assert word_error_rate(SENTENCES[0], heard_spoken) <= 0.2, heard_spoken
    woken = [[line.split(" is waking")[0].split()[-3] for line in part.splitlines() if "is waking" in line]
             for part in (hearing_log, speaking_log)]
    assert woken == [["speech-to-text"], ["text-to-speech"]], (hearing_log, speaking_log)


def _last(log: str, needle: str) -> str | None:
    """The last log line naming `needle`."""
    lines = [line for line in log.splitlines() if needle in line]
    return lines[-1] if lines else None
