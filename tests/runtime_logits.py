"""The last position's logits of a fixed 40-token prompt on SmolLM2-135M, from a
runtime made with the given settings: how tests see that a setting reaches llama.cpp."""

from __future__ import annotations

import llama_cpp
import numpy as np
import pytest

from mlxcel.engine.llama_runtime import LlamaRuntime, RuntimeConfig, logits_row
from mlxcel.models.catalog import CATALOG
from mlxcel.models.store import model_path

PROMPT = list(range(300, 340))


def smollm2_logits(**settings) -> tuple[np.ndarray, int]:
    """(logits, the trained context llama.cpp reports) with these RuntimeConfig fields."""
    path = model_path(CATALOG["smollm2-135m-instruct"])
    if not path.is_file():
        pytest.skip("smollm2-135m-instruct is not pulled")
    runtime = LlamaRuntime(RuntimeConfig(model_path=path, n_ctx=256, n_parallel=1, **settings))
    try:
        array = (llama_cpp.llama_token * len(PROMPT))(*PROMPT)
        assert runtime.decode(llama_cpp.llama_batch_get_one(array, len(PROMPT))) == 0
        n_vocab = llama_cpp.llama_vocab_n_tokens(runtime.vocab)
        return logits_row(runtime.ctx, -1, n_vocab).copy(), runtime.n_ctx_train
    finally:
        runtime.close()
