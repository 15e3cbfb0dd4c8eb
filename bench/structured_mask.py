"""Micro-benchmark of the structured-output layer on a vocabulary alone (no weights).

    .venv/bin/python bench/structured_mask.py [--vocab GGUF ...] [--steps 200] [--threads N]

For each vocabulary: grammar-tokenizer build time, schema compile time, mask fill per
decode step for 1 and 4 constrained slots (random walks through a schema with free
strings, so the masks are not trivial) and apply_mask on one logits row.
Default vocabularies: SmolLM2 (49k) and, if the reference sources are present, Qwen2 (152k).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
import time
from pathlib import Path

import llama_cpp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mlxcel.engine.tokenizer import Tokenizer  # noqa: E402
from mlxcel.structured import BatchMasker, ResponseFormat, apply_mask, compile_constraint  # noqa: E402
from mlxcel.structured.tokenizer import build_lltokenizer  # noqa: E402

CACHE = Path.home() / ".cache" / "mlxcel"
DEFAULT_VOCABS = [
    CACHE / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf",
    CACHE / "reference/0.3.36/src/llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-qwen2.gguf",
]
SCHEMA = {
    "type": "object",
    "properties": {
        "animal": {"type": "string"},
        "habitat": {"enum": ["forest", "desert", "ocean", "urban", "unknown"]},
        "legs": {"type": "integer"},
        "notes": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["animal", "habitat", "legs", "notes"],
    "additionalProperties": False,
}


@llama_cpp.llama_log_callback
def _quiet(_level: int, _text: bytes, _user: ctypes.c_void_p) -> None:
    pass


def load_vocab(path: Path):
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    if not model:
        raise SystemExit(f"cannot load {path}")
    return model, Tokenizer(llama_cpp.llama_model_get_vocab(model))


def median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e3:.3f} ms (p90 {np.percentile(samples, 90) * 1e3:.3f})"


def fill_per_step(tok: Tokenizer, lltok, n_slots: int, steps: int, threads: int | None) -> list[float]:
    spec = ResponseFormat.parse({"type": "json_schema", "json_schema": {"schema": SCHEMA}}).grammar_spec()
    rng = np.random.default_rng(n_slots)
    short = np.array([len(tok.piece(t)) == 1 for t in range(tok.n_vocab)], dtype=np.float32) * 3
    masker = BatchMasker(tok.n_vocab, max_rows=n_slots, n_threads=threads)
    slots = [compile_constraint(spec, lltok) for _ in range(n_slots)]
    samples = []
    for _ in range(steps):
        started = time.perf_counter()
        rows = masker.fill(slots)
        samples.append(time.perf_counter() - started)
        for i, (constraint, row) in enumerate(zip(slots, rows)):
            logits = rng.standard_normal(tok.n_vocab, dtype=np.float32) + short
            apply_mask(logits, row)
            token = int(np.argmax(logits))
            if tok.is_eog(token) or not constraint.accept(token) or constraint.is_finished():
                slots[i] = compile_constraint(spec, lltok)  # start a new request in the slot
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=Path, nargs="*", default=[p for p in DEFAULT_VOCABS if p.exists()])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=None, help="LLExecutor threads (default: llguidance's)")
    args = parser.parse_args()
    llama_cpp.llama_log_set(_quiet, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    for path in args.vocab:
        model, tok = load_vocab(path)
        builds = []
        for _ in range(3):
            started = time.perf_counter()
            lltok = build_lltokenizer(tok)
            builds.append(time.perf_counter() - started)
        print(f"{path.name}: {tok.n_vocab} tokens")
        print(f"  tokenizer build      {median_ms(builds)}")
        spec = ResponseFormat.parse({"type": "json_schema", "json_schema": {"schema": SCHEMA}}).grammar_spec()
        compiles = []
        for _ in range(20):
            started = time.perf_counter()
            compile_constraint(spec, lltok)
            compiles.append(time.perf_counter() - started)
        print(f"  compile (+1st mask)  {median_ms(compiles)}")
        for n_slots in (1, 4):
            samples = fill_per_step(tok, lltok, n_slots, args.steps, args.threads)
            print(f"  mask fill, {n_slots} slot(s) {median_ms(samples)} per step")
        row = np.zeros((tok.n_vocab + 31) // 32, dtype=np.int32)
        compile_constraint(spec, lltok).fill_mask(row)
        logits = np.zeros(tok.n_vocab, dtype=np.float32)
        applies = []
        for _ in range(300):
            started = time.perf_counter()
            apply_mask(logits, row)
            applies.append(time.perf_counter() - started)
        print(f"  apply_mask           {median_ms(applies)}")
        llama_cpp.llama_model_free(model)


if __name__ == "__main__":
    main()
