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
            with client.stream("POST", "/completion", json={**PROMPT, "n_predict": 400, "ignore_eos": True,
                                                            "stream": True}) as response:
                lines = response.iter_lines()
                chunks, last = 0, {}
                for line in lines:
                    if line.startswith("data: "):
                        chunks, last = chunks + 1, json.loads(line[6:])
                        if chunks % 50 == 0:
                            time.sleep(0.3)  # a slow reader: the answer takes longer than the idle time
        finally:
            done.set()
            thread.join()
        took = time.monotonic() - started
    assert last["stop"] is True and last["tokens_predicted"] == 400
    assert took > 2 and seen and not any(seen), (took, seen)


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
    proc = ServerProcess("-c", "512", "-np", "1", "--models-dir", str(tmp_path), "--no-models-autoload",
                         "--sleep-idle-seconds", "1", model=None)
    body = {"model": "alpha", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}

    def status(client) -> str:
        row = next(m for m in client.get("/models").json()["data"] if m["id"] == "alpha")
        assert row["source"] == "models_dir" and row["can_remove"] is False
        return row["status"]["value"]

    def wait(client, value: str) -> None:
        deadline = time.monotonic() + 60
        while status(client) != value:
            assert time.monotonic() < deadline, status(client)
            time.sleep(0.1)

    try:
        proc.wait_ready()
        with proc.client() as client:
            refused = client.post("/v1/chat/completions", json=body)  # never loaded: no autoload
            loaded = client.post("/models/load", json={"model": "alpha"})
            wait(client, "loaded")
            wait(client, "sleeping")
            woken = client.post("/v1/chat/completions", json=body)
            awake = status(client)
            wait(client, "sleeping")
            # unloading a sleeping model ends its sleep: without autoload, no request loads it again
            unloaded = client.post("/models/unload", json={"model": "alpha"})
            after_unload = status(client)
            again = client.post("/models/unload", json={"model": "alpha"})
            refused_after = client.post("/v1/chat/completions", json=body)
    finally:
        proc.stop()
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
        ("/v1/embeddings", {"input": ["a dog runs in the park", "the sun"]}), lambda r: r.json()["data"]


def _reranking_server(tmp_path):
    from tests.fixtures.rerank_model import write_rerank_model
    path = write_rerank_model(tmp_path / "xenc.gguf")
    return ServerProcess("--reranking", "--sleep-idle-seconds", "1", model=str(path)), \
        ("/v1/rerank", {"query": "where is the dog", "documents": ["a dog in the park", "the sun"]}), \
        lambda r: r.json()["results"]


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
    assert all(answer(r) == answer(before) for r in after)
    assert props["is_sleeping"] is False
    assert log.count("is waking") == 1
