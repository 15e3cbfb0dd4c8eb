"""One GGUF loaded by two threads at once (a server whose embedding and rerank models
are the same file loads it so): the page drop after one load must never touch what the
other load maps and unmaps meanwhile (engine/weight_pages.py's MAPPINGS). Before that
lock, such a start died of SIGSEGV now and then; here both loads must work, every
round, and give the same vectors."""

from __future__ import annotations

import threading

import numpy as np

from mlxcel.engine.embedding_runtime import EmbeddingRuntime, EmbeddingRuntimeConfig
from mlxcel.engine.llama_runtime import LlamaRuntime, RuntimeConfig
from mlxcel.engine.weight_pages import MAPPINGS
from mlxcel.models.catalog import CATALOG
from mlxcel.models.store import model_path
from tests.fixtures.minilm import minilm_gguf


def test_the_same_file_loaded_by_two_threads_at_once():
    path = minilm_gguf()
    smol = model_path(CATALOG["smollm2-135m-instruct"])
    for _ in range(3):
        runtimes: list = []
        failures: list[BaseException] = []
        start = threading.Barrier(3)

        def load(make) -> None:
            start.wait()
            try:
                runtimes.append(make())
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        makers = [lambda: EmbeddingRuntime(EmbeddingRuntimeConfig(path, n_ubatch=64, n_seq_max=2))] * 2
        makers.append(lambda: LlamaRuntime(RuntimeConfig(model_path=smol, n_ctx=512, n_parallel=1)))
        threads = [threading.Thread(target=load, args=(make,)) for make in makers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        try:
            assert not failures and len(runtimes) == 3
            tokens = [101, 7592, 2088, 102]
            vectors = [r.embed([tokens])[0] for r in runtimes if isinstance(r, EmbeddingRuntime)]
            assert len(vectors) == 2 and np.array_equal(vectors[0], vectors[1])
        finally:
            for runtime in runtimes:
                runtime.close()
    assert MAPPINGS.acquire(blocking=False)  # nothing holds it once the loads and frees are done
    MAPPINGS.release()
