"""The engine's path on the real SmolLM2 weights: two sequences in one batch, masks
filled while llama_decode runs, applied to the context's logits rows, then sampled by
llama.cpp's own sampler chains (greedy and seeded). The output must validate."""

from __future__ import annotations

import json

import jsonschema
import pytest

from mlxcel.engine.batch import TokenBatch
from mlxcel.engine.llama_runtime import LlamaRuntime, RuntimeConfig
from mlxcel.engine.sampling import SamplerChain, SamplingParams
from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.models.pull import pull
from mlxcel.structured import BatchMasker, ResponseFormat, apply_mask, compile_constraint, grammar_tokenizer, logits_row

from .conftest import MODEL

ANIMAL = {
    "type": "object",
    "properties": {
        "animal": {"type": "string", "maxLength": 24},
        "habitat": {"enum": ["forest", "desert", "ocean", "urban", "unknown"]},
        "legs": {"type": "integer", "minimum": 0, "maximum": 1000},
    },
    "required": ["animal", "habitat", "legs"],
    "additionalProperties": False,
}
PROMPT = "<|im_start|>user\nName one animal, its habitat and its number of legs, as JSON.<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def runtime():
    if not MODEL.exists():
        pull("smollm2-135m-instruct", progress=False, log=lambda _msg: None)
    rt = LlamaRuntime(RuntimeConfig(MODEL, n_ctx=1024, n_parallel=2, n_batch=512))
    yield rt
    rt.close()


def test_constrained_batch_generation(runtime):
    tokenizer = Tokenizer(runtime.vocab)
    lltokenizer = grammar_tokenizer(tokenizer)
    spec = ResponseFormat.parse({"type": "json_schema", "json_schema": {"schema": ANIMAL}}).grammar_spec()
    constraints = [compile_constraint(spec, lltokenizer) for _ in range(2)]
    samplers = [
        SamplerChain(SamplingParams(temperature=0.0), runtime.vocab, tokenizer.n_vocab, 512),
        SamplerChain(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7), runtime.vocab, tokenizer.n_vocab, 512),
    ]
    masker = BatchMasker(tokenizer.n_vocab, max_rows=2)
    batch = TokenBatch(runtime.n_batch)
    prompt = tokenizer.encode(PROMPT)
    index = {seq: batch.add_span(prompt, 0, seq, logits_last=True) for seq in (0, 1)}
    n_past = {0: len(prompt), 1: len(prompt)}
    output: dict[int, list[bytes]] = {0: [], 1: []}
    active = [0, 1]
    try:
        pending = masker.fill_async([constraints[s] for s in active])
        assert runtime.decode(batch.seal()) == 0
        for _ in range(120):
            rows = pending.result()
            batch.clear()
            still = []
            for seq, row in zip(active, rows):
                apply_mask(logits_row(runtime.ctx, index[seq], tokenizer.n_vocab), row)
                token = samplers[seq].sample(runtime.ctx, index[seq])
                assert (row[token // 32] >> (token % 32)) & 1, "the sampler took a masked token"
                if tokenizer.is_eog(token):
                    continue
                assert constraints[seq].accept(token), constraints[seq].error
                output[seq].append(tokenizer.piece(token))
                if constraints[seq].is_finished():
                    continue
                index[seq] = batch.add(token, n_past[seq], seq, True)
                n_past[seq] += 1
                still.append(seq)
            active = still
            if not active:
                break
            pending = masker.fill_async([constraints[s] for s in active])
            assert runtime.decode(batch.seal()) == 0
        assert not active, f"not finished: {output}"
    finally:
        masker.close()
        for sampler in samplers:
            sampler.free()
    for seq in (0, 1):
        jsonschema.validate(json.loads(b"".join(output[seq]).decode()), ANIMAL)


def test_a_decode_first_sends_the_wake_ups_its_thread_held(runtime):
    """The engine wakes event loops just before llama_decode releases the GIL, so the
    loops run beside the decode, not inside the engine's sampling."""
    from mlxcel.engine import held_wakeups

    tokenizer = Tokenizer(runtime.vocab)
    runtime.seq_remove(0, 0, -1)  # whatever an earlier test left in sequence 0
    batch = TokenBatch(runtime.n_batch)
    batch.add_span(tokenizer.encode("Hello"), 0, 0, logits_last=True)
    woken: list[str] = []
    try:
        with held_wakeups.holding():
            held_wakeups.defer(lambda: woken.append("loop"))
            assert woken == []
            assert runtime.decode(batch.seal()) == 0
            assert woken == ["loop"]
    finally:
        runtime.seq_remove(0, 0, -1)
