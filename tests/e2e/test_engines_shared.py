"""Two engines in one process (SmolLM2-135M and Qwen2.5-Coder-0.5B, each its own llama
context and engine thread, as a server of many models runs them) both finish every
request, with the same greedy tokens each gives alone: with the compute gate forced
on (they then take turns step by step) and with it off (llama.cpp's OpenMP threads
share the cores)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from mlxcel.engine.compute_gate import ComputeGate
from mlxcel.engine.engine import Engine
from mlxcel.engine.engine_config import EngineConfig
from mlxcel.engine.llama_runtime import LlamaRuntime, RuntimeConfig
from mlxcel.engine.request import FinishEvent, FinishReason, GenerationRequest, TokenEvent
from mlxcel.engine.sampling import SamplingParams
from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.models.pull import resolve_model

MODELS = ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct")
PROMPTS = ("The capital of France is", "def fibonacci(n):")
N_TOKENS = 24


@dataclass
class Run:
    done: threading.Event = field(default_factory=threading.Event)
    tokens: list[int] = field(default_factory=list)
    finish: FinishEvent | None = None

    def __call__(self, event) -> None:
        if isinstance(event, TokenEvent):
            self.tokens.append(event.token)
        elif isinstance(event, FinishEvent):
            self.finish = event
            self.done.set()


@pytest.fixture(scope="module")
def loaded():
    """Each model's runtime and tokenizer, loaded once for the module."""
    out = []
    for name in MODELS:
        runtime = LlamaRuntime(RuntimeConfig(model_path=resolve_model(name), n_ctx=1024, n_parallel=2))
        out.append((runtime, Tokenizer(runtime.vocab)))
    yield out
    for runtime, _ in out:
        runtime.close()


def start_engines(loaded, gate: ComputeGate) -> tuple[list[Engine], list[list[Run]]]:
    """An engine per model, each with both prompts queued before it starts (so each
    engine's batches are the same whatever the other engine does)."""
    engines, runs = [], []
    for runtime, tokenizer in loaded:
        engine = Engine(runtime, tokenizer, EngineConfig(masker=None, cache_prompt=False, gate=gate))
        engines.append(engine)
        runs.append([submit(engine, prompt) for prompt in PROMPTS])
    return engines, runs


def submit(engine: Engine, prompt: str) -> Run:
    run = Run()
    tokens = engine.tokenizer.encode(prompt, add_special=True, parse_special=False)
    engine.submit(GenerationRequest(prompt_tokens=tokens, emit=run, max_tokens=N_TOKENS, ignore_eos=True,
                                    sampling=SamplingParams(temperature=0.0), cache_prompt=False))
    return run


def finished(run: Run) -> list[int]:
    assert run.done.wait(120), "a request did not finish"
    assert run.finish.reason is FinishReason.LENGTH, run.finish.error
    assert len(run.tokens) == N_TOKENS
    return run.tokens


@pytest.fixture(scope="module")
def alone(loaded):
    """What each model generates for the prompts with no other engine computing."""
    gate = ComputeGate(enabled=True)
    engines, runs = start_engines(loaded, gate)
    out = []
    try:
        for engine, per_engine in zip(engines, runs):
            engine.start()
            out.append([finished(run) for run in per_engine])
    finally:
        for engine in engines:
            engine.stop()
    return out


@pytest.mark.parametrize("gated", [True, False], ids=["gate-on", "gate-off"])
def test_two_engines_busy_at_once_both_finish_with_their_own_greedy_tokens(loaded, alone, gated):
    gate = ComputeGate(enabled=gated)
    engines, runs = start_engines(loaded, gate)
    try:
        for engine in engines:  # two streams each, both engines at once
            engine.start()
        got = [[finished(run) for run in per_engine] for per_engine in runs]
        assert gate.participants == 2
    finally:
        for engine in engines:
            engine.stop()
    assert got == alone
    assert got[0] != got[1]  # two different models answered
    assert gate.participants == 0  # stopped engines leave the gate
    if gated:
        assert gate.handoffs >= N_TOKENS  # they took turns, step by step
        assert not gate.held_by_me() and gate.waiting() == 0
    else:
        assert gate.handoffs == 0
