"""What sampling costs right after llama_decode returns, against the same work on warm
caches, and llama.cpp's backend greedy sampler (the argmax as part of the decode graph)
against the engine's numpy argmax of the logits row.

    .venv/bin/python bench/after_decode.py [--model PATH] [--threads 2] [--steps 400] [--rounds 4]

One sequence decodes one token a step, nothing else runs (no server, no client). Reported:
- the engine's chat-chain candidate set (`Narrowing.fill`, one C call writing the chain's
  entries; top-k 40 and a 64-token penalty window, as bench/run.py's chat_decode asks),
  the numpy set it replaced (`numpy_set`: block-maxima threshold, mask, touched ids,
  flatnonzero, the entries' three fields) and the greedy argmax, timed on the
  row of the decode just done and again at once on the same row (now in cache), medians;
- one-stream greedy tokens/s with the argmax in numpy and with llama.cpp's greedy sampler
  set on the sequence (`llama_set_sampler`), rounds alternating, and whether both gave
  the same tokens.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import llama_cpp  # noqa: E402
import numpy as np  # noqa: E402

from mlxcel.engine.llama_runtime import greedy_token, logits_row  # noqa: E402
from mlxcel.engine.candidates import TOKEN_DATA  # noqa: E402
from mlxcel.engine.narrowing import Narrowing  # noqa: E402
from mlxcel.engine.top_logits import top_threshold  # noqa: E402
from mlxcel.models.pull import resolve_model  # noqa: E402

PROMPT = list(range(100, 140))


class Loop:
    def __init__(self, model_path: Path, threads: int) -> None:
        llama_cpp.llama_backend_init()
        self.model = llama_cpp.llama_model_load_from_file(str(model_path).encode(),
                                                          llama_cpp.llama_model_default_params())
        params = llama_cpp.llama_context_default_params()
        params.n_ctx, params.n_threads, params.n_threads_batch = 4096, threads, threads
        self.ctx = llama_cpp.llama_init_from_model(self.model, params)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(512, 0, 1)

    def decode(self, tokens: list[int], start: int) -> None:
        b = self.batch
        b.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, start + i, 1, i == len(tokens) - 1
            b.seq_id[i][0] = 0
        if llama_cpp.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")

    def restart(self) -> int:
        llama_cpp.llama_memory_seq_rm(self.memory, 0, -1, -1)
        self.decode(PROMPT, 0)
        return len(PROMPT)

    def greedy_run(self, steps: int, backend: bool) -> tuple[float, list[int]]:
        pick = ((lambda: int(llama_cpp.llama_get_sampled_token_ith(self.ctx, -1))) if backend
                else (lambda: int(logits_row(self.ctx, -1, self.n_vocab).argmax())))
        position = self.restart()
        tokens = [pick()]
        started = time.perf_counter()
        for _ in range(steps):
            self.decode([tokens[-1]], position)
            position += 1
            tokens.append(pick())
        return steps / (time.perf_counter() - started), tokens


def numpy_set(row, k: int, touched: list[int], entries) -> int:
    """The candidate set as the engine made it in numpy before _topset (for comparison)."""
    threshold = top_threshold(row, k + len(touched))
    mask = row >= threshold
    mask[touched] = True
    ids = np.flatnonzero(mask)
    n = ids.shape[0]
    entries["id"][:n] = ids
    entries["logit"][:n] = row[ids]
    entries["p"][:n] = 0.0
    return n


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    loop = Loop(resolve_model(args.model), args.threads)

    narrowing = Narrowing(40, [], 64)
    narrowing.accepted_all(list(range(1000, 1064)))
    entries = np.zeros(loop.n_vocab // 8, dtype=TOKEN_DATA)
    touched = list(range(1000, 1064))
    phases = {"set in C": lambda row: narrowing.fill(row, entries),
              "numpy_set": lambda row: numpy_set(row, 40, touched, entries),
              "argmax": lambda row: row.argmax(),
              # the greedy pick whole, the row's lookup included: as the engine took it
              # before (a numpy view, then its argmax) and as it takes it now (one C call)
              "row+argmax": lambda row: int(logits_row(loop.ctx, -1, loop.n_vocab).argmax()),
              "greedy_token": lambda row: greedy_token(loop.ctx, -1, loop.n_vocab, no_bans)}
    no_bans = np.zeros(0, dtype=np.int32)
    cold = {name: [] for name in phases}
    warm = {name: [] for name in phases}
    position = loop.restart()
    for step in range(args.steps):
        loop.decode([300 + step % 50], position)
        position += 1
        name = list(phases)[step % len(phases)]
        row = logits_row(loop.ctx, -1, loop.n_vocab)
        cold[name].append(timed(lambda: phases[name](row)))
        warm[name].append(timed(lambda: phases[name](row)))
    for name in phases:
        print(f"{name:14s} after a decode {1e6 * statistics.median(cold[name]):7.1f} us, "
              f"the same again {1e6 * statistics.median(warm[name]):6.1f} us", flush=True)

    rates: dict[bool, list[float]] = {False: [], True: []}
    outputs: dict[bool, list[int]] = {}
    for rnd in range(args.rounds):
        for backend in ((False, True) if rnd % 2 == 0 else (True, False)):
            if backend:  # a chain is set up for the graph once: a fresh one each time
                chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
                llama_cpp.llama_sampler_chain_add(chain, llama_cpp.llama_sampler_init_greedy())
                llama_cpp.llama_set_sampler(loop.ctx, 0, chain)
            else:
                llama_cpp.llama_set_sampler(loop.ctx, 0, None)
            tps, outputs[backend] = loop.greedy_run(args.steps, backend)
            rates[backend].append(tps)
            print(f"round {rnd + 1}: {'backend greedy' if backend else 'numpy argmax  '} {tps:6.1f} tok/s", flush=True)
    if not args.rounds:
        return
    plain, backend = statistics.median(rates[False]), statistics.median(rates[True])
    print(f"one-stream greedy: numpy argmax {plain:.1f} tok/s, backend greedy {backend:.1f} tok/s, "
          f"ratio {backend / plain:.3f}; same tokens: {outputs[True] == outputs[False]}")


if __name__ == "__main__":
    main()
