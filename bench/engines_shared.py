"""Two llama contexts in one process sharing the cores, without HTTP (issue 16's
"engines share the machine's cores").

    .venv/bin/python bench/engines_shared.py [--a smollm2-135m-instruct]
        [--b qwen2.5-coder-0.5b-instruct] [--streams 2] [--tokens 160] [--repeats 3]
        [--prefill] [--gate auto|on|off] [--threads 2]

Loads model A and model B (each its own LlamaRuntime and Engine thread, as the fleet
runs them), then measures, each phase `--repeats` times, N greedy streams (N =
--streams, ignore_eos, --tokens each) on A alone, on B alone, and on both at once
(N streams each); and first, before B is loaded, A as the process's only context
(a single-model server). With --prefill, also A's decode rate while B prefills an
~870-token prompt (a step of B then takes far longer than one of A's). A phase's
decode rate counts the tokens emitted between the moment every stream of the phase
has its first token (prefill is left out) and the moment the first of them finishes.
It prints per-engine rates and two ratios:

  ratio       both-busy aggregate / A-alone aggregate (what the issue names; with
              A = B the plain figure, with models of unequal speed it mixes speeds)
  machine     rate_A(both)/rate_A(alone) + rate_B(both)/rate_B(alone): the share
              of the machine that did useful work (1.0: no loss to sharing)

--gate on|off forces the compute gate (mlxcel/engine/compute_gate.py) either way;
auto (the default) decides as the server does. llama.cpp's OpenMP settings
(OMP_WAIT_POLICY, GOMP_SPINCOUNT) are read when llama_cpp loads: set them in the
environment of this command.
Figures and what they decided: bench/README.md, "Two models in one process".
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlxcel.engine.compute_gate import COMPUTE_GATE, gate_by_default
from mlxcel.engine.engine import Engine
from mlxcel.engine.engine_config import EngineConfig
from mlxcel.engine.llama_runtime import LlamaRuntime, RuntimeConfig
from mlxcel.engine.request import FinishEvent, GenerationRequest, TokenEvent
from mlxcel.engine.sampling import SamplingParams
from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.models.pull import resolve_model

PROMPTS = ["Write a long story about a lighthouse keeper.", "Explain how rivers shape valleys, in detail.",
           "List many facts about the planets of the solar system.", "Describe a walk through an old city.",
           "Write a long essay about the history of bread.", "Tell a story about a robot learning to paint."]


@dataclass
class Stream:
    done: threading.Event = field(default_factory=threading.Event)
    times: list[float] = field(default_factory=list)  # when each token came
    finished_at: float = 0.0
    tokens: list[int] = field(default_factory=list)
    error: str | None = None
    request_id: int = 0

    def __call__(self, event) -> None:
        if isinstance(event, TokenEvent):
            self.times.append(time.perf_counter())
            self.tokens.append(event.token)
        elif isinstance(event, FinishEvent):
            self.finished_at = time.perf_counter()
            self.error = event.error
            self.done.set()


@dataclass
class Model:
    name: str
    runtime: LlamaRuntime
    tokenizer: Tokenizer
    engine: Engine

    def submit(self, prompt: str, tokens: int) -> Stream:
        stream = Stream()
        ids = self.tokenizer.encode(prompt, add_special=True, parse_special=False)
        request = GenerationRequest(prompt_tokens=ids, emit=stream, max_tokens=tokens, ignore_eos=True,
                                    sampling=SamplingParams(temperature=0.0), cache_prompt=False)
        stream.request_id = request.id
        self.engine.submit(request)
        return stream


def load(name: str, streams: int, tokens: int, threads: int) -> Model:
    path = resolve_model(name)
    runtime = LlamaRuntime(RuntimeConfig(model_path=path, n_ctx=streams * max(tokens + 128, PREFILL_SLOT), n_parallel=streams,
                                         n_threads=threads, n_threads_batch=threads))
    tokenizer = Tokenizer(runtime.vocab)
    engine = Engine(runtime, tokenizer, EngineConfig(cache_prompt=False, masker=None))
    engine.start()
    return Model(name, runtime, tokenizer, engine)


QUIET_SHARE = 0.1  # a phase during which other processes used more than this share of one core is redone
REDOS = 4  # at most this many times


def run_phase(models: list[Model], streams: int, tokens: int) -> list[float]:
    """Like `_run_phase`, redone (up to REDOS times) while other processes on the
    machine took CPU time meanwhile; the last try stands."""
    global disturbed
    for attempt in range(REDOS + 1):
        busy0, _ = cpu_times()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        rates = _run_phase(models, streams, tokens)
        others = (cpu_times()[0] - busy0) - (time.process_time() - cpu0)
        if others <= QUIET_SHARE * (time.perf_counter() - wall0) or attempt == REDOS:
            return rates
        disturbed += 1
        time.sleep(2.0)
    raise AssertionError("unreachable")


disturbed = 0  # phases redone because other processes took CPU meanwhile


def _run_phase(models: list[Model], streams: int, tokens: int) -> list[float]:
    """Each model's decode rate (tok/s) over the window where all streams decode."""
    started = {m.name + str(i): m for i, m in enumerate(models)}
    runs = [[m.submit(PROMPTS[(i + k) % len(PROMPTS)], tokens) for i in range(streams)]
            for k, m in enumerate(started.values())]
    for group in runs:
        for s in group:
            if not s.done.wait(600):
                raise TimeoutError("a stream did not finish")
            if s.error:
                raise RuntimeError(s.error)
    every = [s for group in runs for s in group]
    begin = max(s.times[0] for s in every)
    end = min(s.finished_at for s in every)
    if end <= begin:
        raise RuntimeError("no window where every stream decodes: raise --tokens")
    return [sum(1 for s in group for t in s.times if begin <= t <= end) / (end - begin) for group in runs]


LONG_PROMPT = " ".join(f"Paragraph {i} of a long document about rivers." for i in range(80))  # ~870 tokens
PREFILL_SLOT = 1280  # each slot's context holds the long prompt


def prefill_phase(a: Model, b: Model | None, streams: int) -> tuple[float, float]:
    """A decodes `streams` streams while B prefills LONG_PROMPT (B None: A alone over
    a like window): A's decode rate over B's prefill, and that prefill's seconds."""
    runs = [a.submit(PROMPTS[i % len(PROMPTS)], PREFILL_SLOT - 200) for i in range(streams)]
    while not all(s.times for s in runs):
        time.sleep(0.01)
    time.sleep(0.2)
    begin = time.perf_counter()
    if b is not None:
        long = b.submit(LONG_PROMPT, 1)
        long.done.wait(600)
        end = long.finished_at
    else:
        time.sleep(1.0)
        end = time.perf_counter()
    for s in runs:
        a.engine.cancel(s.request_id)
    for s in runs:
        s.done.wait(600)
    end = min([end, *(s.finished_at for s in runs)])
    return sum(1 for s in runs for t in s.times if begin <= t <= end) / (end - begin), end - begin


def _prefill_alone(b: Model) -> float:
    """Seconds B takes to prefill LONG_PROMPT with nothing else running."""
    started = time.perf_counter()
    long = b.submit(LONG_PROMPT, 1)
    long.done.wait(600)
    return long.finished_at - started


def cpu_times() -> tuple[float, float]:
    """(busy, stolen) seconds of the whole machine so far, from /proc/stat (Linux; zeros elsewhere)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields[:3]) + sum(fields[5:7])) / tick, (fields[7] if len(fields) > 7 else 0) / tick


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="smollm2-135m-instruct")
    ap.add_argument("--b", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--streams", type=int, default=2, help="greedy streams per busy engine")
    ap.add_argument("--tokens", type=int, default=160, help="tokens each stream generates")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gate", choices=("auto", "on", "off"), default="auto",
                    help="the compute gate: as the server decides (auto), or forced on or off")
    ap.add_argument("--no-gate", dest="gate", action="store_const", const="off", help="same as --gate off")
    ap.add_argument("--prefill", action="store_true",
                    help="also: A's decode rate while B prefills a ~800-token prompt, and that prefill's time")
    ap.add_argument("--json", action="store_true", help="print one JSON line as well")
    args = ap.parse_args()
    COMPUTE_GATE.enabled = {"auto": gate_by_default(), "on": True, "off": False}[args.gate]
    busy0, stolen0 = cpu_times()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    a = load(args.a, args.streams, args.tokens, args.threads)
    run_phase([a], 1, 8)  # first decodes pay for lazy set-up
    # A as the only context of the process (a single-model server), before B exists
    solo = [run_phase([a], args.streams, args.tokens)[0] for _ in range(args.repeats)]
    b = load(args.b, args.streams, args.tokens, args.threads)
    try:
        run_phase([b], 1, 8)
        alone_a, alone_b, both_a, both_b = [], [], [], []
        prefill_alone, during, prefill_both = [], [], []
        for _ in range(args.repeats):
            alone_a.append(run_phase([a], args.streams, args.tokens)[0])
            ra, rb = run_phase([a, b], args.streams, args.tokens)
            both_a.append(ra)
            both_b.append(rb)
            alone_b.append(run_phase([b], args.streams, args.tokens)[0])
            if args.prefill:
                prefill_alone.append(_prefill_alone(b))
                rate, seconds = prefill_phase(a, b, args.streams)
                during.append(rate)
                prefill_both.append(seconds)
    finally:
        a.engine.stop()
        b.engine.stop()
    med = statistics.median
    busy1, stolen1 = cpu_times()
    wall = time.perf_counter() - wall0
    others = max(0.0, (busy1 - busy0) - (time.process_time() - cpu0))
    ratios = [(x + y) / z for x, y, z in zip(both_a, both_b, alone_a)]
    machine = [x / za + y / zb for x, y, za, zb in zip(both_a, both_b, alone_a, alone_b)]
    env = {k: os.environ[k] for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS") if k in os.environ}
    gate = ("on" if COMPUTE_GATE.enabled else "off") + (" (auto)" if args.gate == "auto" else "")
    print(f"A={args.a} B={args.b} streams={args.streams} tokens={args.tokens} -t {args.threads} "
          f"gate={gate} env={env or '-'}")
    print(f"  A solo       {med(solo):7.1f} tok/s   ({', '.join(f'{x:.1f}' for x in solo)})  (before B loaded)")
    print(f"  A alone      {med(alone_a):7.1f} tok/s   ({', '.join(f'{x:.1f}' for x in alone_a)})")
    print(f"  B alone      {med(alone_b):7.1f} tok/s   ({', '.join(f'{x:.1f}' for x in alone_b)})")
    print(f"  both: A      {med(both_a):7.1f} tok/s   ({', '.join(f'{x:.1f}' for x in both_a)})")
    print(f"  both: B      {med(both_b):7.1f} tok/s   ({', '.join(f'{x:.1f}' for x in both_b)})")
    print(f"  both: total  {med([x + y for x, y in zip(both_a, both_b)]):7.1f} tok/s")
    print(f"  ratio (both total / A alone)  {med(ratios):.3f}   ({', '.join(f'{x:.3f}' for x in ratios)})")
    print(f"  machine (sum of both/alone)   {med(machine):.3f}   ({', '.join(f'{x:.3f}' for x in machine)})")
    if args.prefill:
        print(f"  B prefills ~{len(b.tokenizer.encode(LONG_PROMPT))} tokens: alone {med(prefill_alone):.2f} s, "
              f"while A decodes {med(prefill_both):.2f} s; A decodes meanwhile at {med(during):.1f} tok/s "
              f"({', '.join(f'{x:.1f}' for x in during)})")
    print(f"  gate: {COMPUTE_GATE.waits} waits, {COMPUTE_GATE.handoffs} handoffs;  over {wall:.0f} s: "
          f"{others:.1f} CPU-s used by other processes, {stolen1 - stolen0:.1f} s stolen by the host "
          f"(either one skews the figures; {disturbed} phases redone for it)")
    if args.json:
        print(json.dumps({"a": args.a, "b": args.b, "streams": args.streams, "tokens": args.tokens, "gate": gate,
                          "env": env, "solo_a": solo, "alone_a": alone_a, "alone_b": alone_b, "both_a": both_a, "both_b": both_b,
                          "ratio": med(ratios), "machine": med(machine),
                          "prefill_alone": prefill_alone, "prefill_both": prefill_both, "a_during_prefill": during}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
