"""The bare decode loop: the limit a server around llama.cpp can reach.

N sequences, each a short prompt, are prefilled in one batch and then decode together
through llama_decode with nothing around them: every step takes each sequence's next
token by argmax over its logits row (numpy) and decodes them as one batch. No HTTP, no
scheduling, no sampler chain, no text. With `sampling` (bench/run.py's chat row), each
token comes from llama.cpp's own sampler chain instead, built in llama-server's default
order with the request's settings: the limit for a sampled request.

    .venv/bin/python bench/bare_loop.py MODEL [--nseq 1,4] [--steps 128] [--ctx 8192]
        [--parallel 4] [--threads 2] [--kv split|unified|both]

The context is the servers' (`-c CTX -np PARALLEL -t THREADS`, n_batch 2048, n_ubatch
512): `split` is kv_unified = False (what llama-server and mlxcel use by default: each
sequence gets CTX / PARALLEL cells), `unified` is kv_unified = True (all sequences
share CTX cells, as ../shared/bare_decode_loop.py measures). Two figures per run:

- `decode_tps`: nseq x steps / the time of the decode steps (after the prefill), the
  counterpart of bench/run.py's `decode_tps` (first to last token);
- `wall_tps`: nseq x (steps + 1) / the time from the prefill's start to the last token,
  the counterpart of `aggregate_tps` (which counts the prompts' prefill).

`--worker` (for bench/run.py) loads the model once and answers JSON lines on stdin
(`{"nseq": 4, "steps": 128, "kv_unified": false, "seed": "agg-0"}`, optionally with
`"sampling": {"temperature": 0.7, "top_k": 40, "top_p": 0.9, "min_p": 0.05,
"repeat_penalty": 1.1}`) with a JSON line.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
import time
from pathlib import Path

import llama_cpp as L
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prompts import short_prompt  # noqa: E402

from mlxcel.engine.weight_buffers import repack_weights  # noqa: E402


class BareLoop:
    """One loaded model; each run() makes a fresh context with the asked KV layout."""

    def __init__(self, model: Path, n_ctx: int = 8192, n_parallel: int = 4, n_threads: int = 2) -> None:
        L.llama_log_set(_quiet, ctypes.c_void_p(0))
        L.llama_backend_init()
        params = L.llama_model_default_params()
        params.use_extra_bufts = repack_weights(None)  # the weights held as both servers hold them here
        self.model = L.llama_model_load_from_file(str(model).encode(), params)
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {model}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.n_ctx, self.n_parallel, self.n_threads = n_ctx, n_parallel, n_threads

    def context(self, kv_unified: bool, nseq: int):
        """A fresh context as the servers make theirs (-c -np -t), the caller frees it."""
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = self.n_ctx, 2048, 512
        cp.n_seq_max = max(self.n_parallel, nseq)
        cp.n_threads = cp.n_threads_batch = self.n_threads
        cp.kv_unified = kv_unified
        cp.no_perf = True
        ctx = L.llama_init_from_model(self.model, cp)
        if not ctx:
            raise SystemExit("llama.cpp could not create the context")
        return ctx

    def tokenize(self, text: str) -> list[int]:
        data = text.encode()
        buf = (L.llama_token * (len(data) + 8))()
        n = L.llama_tokenize(self.vocab, data, len(data), buf, len(buf), True, True)
        return list(buf[:n])

    def run(self, nseq: int, steps: int, kv_unified: bool, seed: str = "bare", sampling: dict | None = None) -> dict:
        ctx = self.context(kv_unified, nseq)
        batch = L.llama_batch_init(2048, 0, 1)
        chains = [sampler_chain(sampling, self.n_vocab, seq) for seq in range(nseq)] if sampling else []
        try:
            return self._run(ctx, batch, nseq, steps, seed, chains)
        finally:
            for chain in chains:
                L.llama_sampler_free(chain)
            L.llama_batch_free(batch)
            L.llama_free(ctx)

    def _run(self, ctx, batch, nseq: int, steps: int, seed: str, chains: list) -> dict:
        def add(token: int, pos: int, seq: int, logits: bool) -> int:
            i = batch.n_tokens
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos, 1
            batch.seq_id[i][0], batch.logits[i] = seq, logits
            batch.n_tokens = i + 1
            return i

        def argmax(index: int) -> int:
            row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, index), shape=(self.n_vocab,))
            return int(row.argmax())

        def pick(seq: int, index: int) -> int:
            if not chains:
                return argmax(index)
            return int(L.llama_sampler_sample(chains[seq], ctx, index))  # it accepts the token too

        prompts = [self.tokenize(short_prompt(f"{seed}-{s}")) for s in range(nseq)]
        started = time.perf_counter()
        batch.n_tokens = 0
        rows = [max(add(t, j, s, j == len(p) - 1) for j, t in enumerate(p)) for s, p in enumerate(prompts)]
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed on the prompts")
        positions = [len(p) for p in prompts]
        tokens = [pick(s, i) for s, i in enumerate(rows)]
        decoding = time.perf_counter()
        for _ in range(steps):
            batch.n_tokens = 0
            rows = [add(tokens[s], positions[s], s, True) for s in range(nseq)]
            if L.llama_decode(ctx, batch) != 0:
                raise RuntimeError("llama_decode failed")
            positions = [p + 1 for p in positions]
            tokens = [pick(s, i) for s, i in enumerate(rows)]
        done = time.perf_counter()
        return {"nseq": nseq, "steps": steps, "decode_tps": nseq * steps / (done - decoding),
                "wall_tps": nseq * (steps + 1) / (done - started), "prefill_s": decoding - started}

    def close(self) -> None:
        L.llama_model_free(self.model)


def sampler_chain(sampling: dict, n_vocab: int, seq: int):
    """llama.cpp's chain for these settings, in llama-server's default order (penalties,
    top-k, top-p, min-p, temperature, then the seeded draw; DRY, typical-p and XTC are
    off at their defaults, so they are left out, as llama-server leaves them inactive)."""
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    parts = [L.llama_sampler_init_penalties(n_vocab, 64, float(sampling.get("repeat_penalty", 1.0)), 0.0, 0.0),
             L.llama_sampler_init_top_k(int(sampling.get("top_k", 40))),
             L.llama_sampler_init_top_p(float(sampling.get("top_p", 0.95)), 1),
             L.llama_sampler_init_min_p(float(sampling.get("min_p", 0.05)), 1),
             L.llama_sampler_init_temp(float(sampling.get("temperature", 0.8))),
             L.llama_sampler_init_dist(1000 + seq)]
    for part in parts:
        L.llama_sampler_chain_add(chain, part)
    return chain


@L.llama_log_callback
def _quiet(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    if level == 4:  # errors only
        sys.stderr.write(text.decode(errors="replace"))


def worker(loop: BareLoop) -> None:
    loop.run(1, 4, False, "warm-up")
    print(json.dumps({"ready": True, "n_vocab": loop.n_vocab}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        ask = json.loads(line)
        result = loop.run(int(ask["nseq"]), int(ask["steps"]), bool(ask["kv_unified"]), ask.get("seed", "bare"),
                          ask.get("sampling"))
        print(json.dumps(result), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--nseq", default="1,4")
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--ctx", "-c", type=int, default=8192)
    ap.add_argument("--parallel", "-np", type=int, default=4)
    ap.add_argument("--threads", "-t", type=int, default=2)
    ap.add_argument("--kv", choices=("split", "unified", "both"), default="both")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--worker", action="store_true", help="answer JSON lines on stdin (for bench/run.py)")
    args = ap.parse_args()
    loop = BareLoop(args.model.expanduser(), args.ctx, args.parallel, args.threads)
    if args.worker:
        worker(loop)
        return 0
    layouts = {"split": [False], "unified": [True], "both": [False, True]}[args.kv]
    print(f"{args.model.name}, -c {args.ctx} -np {args.parallel} -t {args.threads}, {args.steps} steps")
    for nseq in (int(n) for n in args.nseq.split(",")):
        for unified in layouts:
            for r in range(args.repeats):
                res = loop.run(nseq, args.steps, unified, seed=f"bare-{r}")
                print(f"  nseq {nseq} kv {'unified' if unified else 'split  '}: decode {res['decode_tps']:6.1f} tok/s,"
                      f" wall (prefill included) {res['wall_tps']:6.1f} tok/s", flush=True)
    loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
