"""Hostile bodies on the routes issue 14 and 15 added (embeddings, reranking, /infill,
llama-server's extra fields and admin routes): each gets a 4xx (or /infill's 501 on a
model without FIM tokens), never a 5xx or a hang,
while /health stays fast and the server keeps serving. Then the same routes, and the chat
routes that render without generating, fuzzed with bodies built from their wire models
(tests/fuzz_strategies.py), as test_fuzz.py fuzzes the generating routes."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings

from mlxcel.api.embeddings.wire import EmbeddingsRequest
from mlxcel.api.native.infill_wire import InfillRequest
from mlxcel.api.openai.chat_wire import ChatCompletionRequest
from mlxcel.api.rerank.wire import RerankRequest
from tests.e2e import fuzz_client
from tests.fixtures.minilm import NAME, minilm_gguf
from tests.fuzz_strategies import hostile_bodies
from tests.server_process import ServerProcess

DEEP = "[" * 5000 + "]" * 5000
MANY = 20_000


def _items(item: str, n: int = MANY) -> str:
    return "[" + ",".join([item] * n) + "]"


EMBEDDING_BODIES = [
    '{"input": "\\ud800"}', '{"input": NaN}', '{"input": ' + _items('"x"') + '}', '{"input": ' + DEEP + '}',
    '{"input": [[1, 2, 99999999]]}', '{"input": [[-1]]}', '{"input": []}', '{"input": "x", "encoding_format": "hex"}',
    '{"input": "x", "embd_normalize": 1e300}', '{"input": "x", "embd_normalize": NaN}', '{"content": 5}',
    '{"input": [' + _items("5") + ']}', '{"input": "x", "truncate": "yes"}', 'not json', '{"input": {"a": 1}}', '[]',
]
RERANK_BODIES = [
    '{"query": "\\udfff", "documents": ["a"]}', '{"query": "q", "documents": []}',
    '{"query": "q", "documents": ' + _items('"d"') + '}', '{"query": "q", "documents": ["a"], "top_n": -1}',
    '{"query": "q", "documents": ["a"], "top_n": 1e20}', '{"query": "q", "texts": ["a"], "raw_scores": NaN}',
    '{"query": ' + DEEP + ', "documents": ["a"]}', '{"query": "q", "documents": [{"text": 5}]}',
    '{"query": "q", "documents": [null]}', '{"query": "q"}', '{"documents": ["a"]}',
    '{"query": "q", "documents": ["a"], "truncate": "yes"}',
]
NATIVE_BODIES = [
    '{"prompt": "x", "samplers": ' + _items('"top_k"', 100) + '}', '{"prompt": "x", "n_cmpl": 1e9}',
    '{"prompt": "x", "id_slot": 99999999999}', '{"prompt": "x", "t_max_predict_ms": 1e300}',
    '{"prompt": "x", "n_indent": -3}', '{"prompt": "x", "sse_ping_interval": 1e12, "stream": true}',
    '{"prompt": "x", "lora": ' + _items('{"id": 1}', 100) + '}', '{"prompt": "x", "mirostat": 7}',
    '{"prompt": "x", "dynatemp_range": NaN}', '{"prompt": {"prompt_string": "\\ud800"}}',
    '{"prompt": "x", "response_fields": ' + _items('"a/b"', 10_000) + '}', '{"prompt": "x", "samplers": "kz"}',
]
CASES = ([(path, body) for path in ("/v1/embeddings", "/embedding", "/embeddings") for body in EMBEDDING_BODIES]
         + [(path, body) for path in ("/v1/rerank", "/rerank") for body in RERANK_BODIES]
         + [("/completion", body) for body in NATIVE_BODIES]
         + [("/infill", '{"input_prefix": "\\ud800", "input_suffix": "x"}'), ("/infill", '{"input_prefix": 1}'),
            ("/infill", '{"input_extra": ' + DEEP + '}'), ("/lora-adapters", DEEP),
            ("/lora-adapters", _items("1")), ("/v1/chat/completions/input_tokens", '{"messages": ' + DEEP + '}')])


@pytest.fixture(scope="module")
def hosted():
    minilm_gguf()
    proc = ServerProcess("-c", "2048", "-np", "2", "--embedding-model", NAME, "--rerank-model", NAME)
    try:
        yield proc.wait_ready()
    finally:
        proc.stop()


def test_hostile_bodies_get_4xx_and_health_stays_fast(hosted):
    slow: list[float] = []
    done = threading.Event()

    def watch_health() -> None:
        while not done.is_set():
            started = time.perf_counter()
            assert httpx.get(f"{hosted.base_url}/health", timeout=30).status_code == 200
            slow.extend([time.perf_counter() - started] if time.perf_counter() - started > 1.0 else [])
            time.sleep(0.1)

    watcher = threading.Thread(target=watch_health)
    watcher.start()
    answers = []
    try:
        with hosted.client() as client:
            for path, body in CASES:
                response = client.post(path, content=body.encode("utf-8", "surrogatepass"),
                                       headers={"content-type": "application/json"})
                answers.append((path, body[:60], response.status_code))
    finally:
        done.set()
        watcher.join()
    # 501: /infill on a model without FIM tokens says so first, as llama-server does
    assert [a for a in answers if not (400 <= a[2] < 500 or a[2] == 501)] == []
    assert slow == []
    with hosted.client() as client:  # still serving
        assert client.post("/v1/embeddings", json={"input": "still here"}).status_code == 200
        assert client.post("/v1/rerank", json={"query": "q", "documents": ["a", "b"]}).status_code == 200


# (path, wire model, generation budget field, examples): the routes test_fuzz.py leaves out
FUZZED = [("/v1/embeddings", EmbeddingsRequest, None, 120), ("/v1/rerank", RerankRequest, None, 120),
          ("/infill", InfillRequest, "n_predict", 80), ("/apply-template", ChatCompletionRequest, "max_tokens", 120),
          ("/v1/chat/completions/input_tokens", ChatCompletionRequest, "max_tokens", 120)]


@pytest.mark.parametrize("path, model, budget_field, examples", FUZZED, ids=[f[0] for f in FUZZED])
def test_fuzzed_bodies_on_these_routes_never_break_the_server(hosted, monkeypatch, path, model, budget_field,
                                                              examples):
    # 501: /infill on a model without FIM tokens
    monkeypatch.setattr(fuzz_client, "ALLOWED_STATUSES", fuzz_client.ALLOWED_STATUSES | {501})
    with hosted.client() as client:
        @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                  phases=[Phase.explicit, Phase.generate, Phase.shrink],
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
                                         HealthCheck.large_base_example])
        @given(raw=hostile_bodies(model, budget_field))
        def fuzz(raw: bytes) -> None:
            found = fuzz_client.checked_problems(client, path, raw)
            assert not found, "\n".join(found) + f"\nbody sent: {raw[:2000]!r}"

        fuzz()
        assert client.get("/health").status_code == 200
