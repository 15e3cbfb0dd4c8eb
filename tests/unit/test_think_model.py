"""The tiny thinking test model: llama.cpp loads it, tokenizes with it and decodes."""

from __future__ import annotations

import math
from pathlib import Path

import llama_cpp

from mlxcel.chat.template import ChatTemplate
from mlxcel.engine.llama_runtime import LlamaRuntime, RuntimeConfig
from mlxcel.engine.tokenizer import Tokenizer
from tests.fixtures.think_model import qwen3_template


def test_llama_cpp_loads_tokenizes_and_decodes(think_model_path: Path) -> None:
    runtime = LlamaRuntime(RuntimeConfig(model_path=think_model_path, n_ctx=256, n_parallel=1))
    try:
        assert runtime.chat_template() == qwen3_template()
        tokenizer = Tokenizer(runtime.vocab)
        assert tokenizer.n_vocab == 49152

        template = ChatTemplate(runtime.chat_template())
        prompt = template.render([{"role": "user", "content": "Hello"}], enable_thinking=False)
        tokens = tokenizer.encode(prompt, add_special=False)
        assert tokens[0] == tokenizer.encode("<|im_start|>", add_special=False)[0] == 1
        assert tokenizer.decode(tokens) == prompt

        runtime.warm_up(tokens[0])
        ids = (llama_cpp.llama_token * len(tokens))(*tokens)  # the batch points into it
        batch = llama_cpp.llama_batch_get_one(ids, len(tokens))
        assert runtime.decode(batch) == 0
        logits = llama_cpp.llama_get_logits_ith(runtime.ctx, -1)
        row = [logits[i] for i in range(tokenizer.n_vocab)]
        assert all(math.isfinite(x) for x in row) and max(row) > min(row)
    finally:
        runtime.close()
