"""What a verify batch costs when one slot's drafts join the other slots' tokens.

    .venv/bin/python bench/draft_batches.py [MODEL] [--unified] [--threads 2]

Four sequences (a 40-token prefix each) in one context, `-c 8192 -np 4` as the
servers run it, no server around it. For k drafts on sequence 0 it times (best of 8)
one llama_decode of the four next tokens plus the k drafts, against k + 1 and k + 4
tokens of one sequence: the sizes the engine's cost curve is measured at. With a KV
stream per sequence (the default; `--unified` for one shared pool) llama.cpp splits a
batch equally, so the drafts run as a micro-batch of their own after the four single
tokens, unless every sequence in the batch drafts as many (bench/README, "What a
draft costs beside other slots' tokens").
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import llama_cpp as L

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bare_loop import BareLoop  # noqa: E402

MODEL = Path.home() / ".cache/mlxcel/models/SmolLM2-135M-Instruct.Q4_1.gguf"
PREFIX = 40
SEQS = 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", type=Path, default=MODEL)
    ap.add_argument("--unified", action="store_true", help="one KV pool for every sequence (-kvu)")
    ap.add_argument("--threads", "-t", type=int, default=2)
    args = ap.parse_args()
    # the weights held and the context made as both servers make theirs
    loop = BareLoop(args.model, n_ctx=8192, n_parallel=SEQS, n_threads=args.threads)
    ctx = loop.context(args.unified, SEQS)
    memory = L.llama_get_memory(ctx)
    batch = L.llama_batch_init(2048, 0, SEQS)

    def add(token: int, pos: int, seq: int) -> None:
        i = batch.n_tokens
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, True
        batch.seq_id[i][0] = seq
        batch.n_tokens += 1

    batch.n_tokens = 0
    for seq in range(SEQS):
        for j in range(PREFIX):
            add(1000 + j + seq, j, seq)
    if L.llama_decode(ctx, batch) != 0:
        raise SystemExit("llama_decode failed on the prefixes")

    def best_ms(drafts: int, seqs: int) -> float:
        best = float("inf")
        for _ in range(8):
            batch.n_tokens = 0
            for seq in range(seqs):
                add(2000 + seq, PREFIX, seq)
            for k in range(drafts):
                add(3000 + k, PREFIX + 1 + k, 0)
            started = time.perf_counter()
            if L.llama_decode(ctx, batch) != 0:
                raise SystemExit("llama_decode failed")
            best = min(best, time.perf_counter() - started)
            for seq in range(seqs):
                L.llama_memory_seq_rm(memory, seq, PREFIX, -1)
        return 1000 * best

    print(f"{args.model.name}, -t {args.threads}, kv {'unified' if args.unified else 'a stream per sequence'}")
    print("drafts  4 seqs + drafts on one   1 seq, 1 + drafts   1 seq, 4 + drafts   (ms)")
    for drafts in (0, 4, 8, 12):
        print(f"{drafts:6d}  {best_ms(drafts, SEQS):22.1f}  {best_ms(drafts, 1):18.1f}  {best_ms(drafts + 3, 1):18.1f}")
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    loop.close()


if __name__ == "__main__":
    main()
