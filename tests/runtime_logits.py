"""The last position's logits of a fixed 40-token prompt on SmolLM2-135M, from a
runtime made with the given settings: how tests see that a setting reaches llama.cpp."""

from __future__ import annotations

import llama_cpp
import numpy as np

from mlxcel.engine.llama_runtime import LlamaRuntime, RuntimeConfig, logits_row
from mlxcel.models.pull import pull

PROMPT = list(range(300, 340))


def smollm2_logits(**settings) -> tuple[np.ndarray, int]:
    """(logits, the trained context llama.cpp reports) with these RuntimeConfig fields."""
    path = pull("smollm2-135m-instruct", progress=False, log=lambda _msg: None)  # at once when stored
    runtime = LlamaRuntime(RuntimeConfig(model_path=path, n_ctx=256, n_parallel=1, **settings))
    try:
        array = (llama_cpp.llama_token * len(PROMPT))(*PROMPT)
        assert runtime.decode(llama_cpp.llama_batch_get_one(array, len(PROMPT))) == 0
        n_vocab = llama_cpp.llama_vocab_n_tokens(runtime.vocab)
        return logits_row(runtime.ctx, -1, n_vocab).copy(), runtime.n_ctx_train
    finally:
        runtime.close()
