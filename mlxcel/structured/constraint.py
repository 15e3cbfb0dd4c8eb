"""Per-request grammar state and the token masks it yields, for the engine thread.

A mask row is `(n_vocab + 31) // 32` int32 words; bit `t % 32` of word `t // 32` is
set when token `t` is allowed. EOG tokens are allowed exactly when the grammar is
complete (accepting).

How the engine uses it. The request arrives with its Constraint already compiled (on
the HTTP side, see grammar.py); the engine keeps one BatchMasker(n_vocab, n_parallel).
Per step, once the batch is built (each slot's `batch_index` known):

    constrained = [s for s in in_batch if s.constraint is not None and s.batch_index >= 0]
    pending = masker.fill_async([s.constraint for s in constrained])
    rc = runtime.decode(batch)                # drops the GIL: the masks fill meanwhile
    rows = pending.result()
    for slot, row in zip(constrained, rows):
        if slot.constraint.error:             # a per-step limit was hit
            finish(slot, ERROR); continue
        apply_mask(logits_row(ctx, slot.batch_index, n_vocab), row)
        token = slot.sampler.sample(ctx, slot.batch_index)   # reads the masked row
        if is_eog(token): finish(slot, STOP)  # EOG is allowed only when the grammar accepts
        elif not slot.constraint.accept(token): finish(slot, ERROR)
        elif slot.constraint.is_finished(): emit(token); finish(slot, STOP)
        else: emit(token)                     # and decode it next step

A slot's mask depends only on the tokens it has accepted, all known before the step's
`llama_decode`, so filling overlaps the decode; the engine must not touch those
constraints until `pending` is done. Stopping at `is_finished()` saves a decode and
matters with `ignore_eos`: its ban on EOG would otherwise leave no allowed token.
"""

from __future__ import annotations

import concurrent.futures
import sys
from collections.abc import Sequence

import numpy as np
from llguidance import LLExecutor, LLMatcher

from mlxcel.engine.llama_runtime import logits_row  # noqa: F401  (re-exported)
from mlxcel.structured.errors import one_line_reason

if sys.byteorder != "little":  # the bit order of apply_mask assumes it
    raise ImportError("mlxcel.structured needs a little-endian machine")


def mask_words(n_vocab: int) -> int:
    return (n_vocab + 31) // 32


class Constraint:
    """One request's grammar: which tokens may come next, and the tokens taken so far.
    Used by one thread at a time (the engine, or its mask-filling helper)."""

    def __init__(self, matcher: LLMatcher, n_vocab: int, source: str = "") -> None:
        self.matcher = matcher
        self.source = source  # the GBNF text it came from, if any (generation_settings.grammar)
        self.n_vocab = n_vocab
        self.n_words = mask_words(n_vocab)

    def fill_mask(self, bitmask_row: np.ndarray) -> None:
        """Write the allowed-token bits for the next token into a contiguous int32 row."""
        _check_rows(bitmask_row, self.n_words)
        self.matcher.unsafe_compute_mask_ptr(bitmask_row.ctypes.data, bitmask_row.nbytes)

    def accept(self, token: int) -> bool:
        """Advance by a sampled token; False puts the constraint in its error state."""
        return bool(self.matcher.consume_token(token))

    def is_finished(self) -> bool:
        """The grammar is complete and nothing but EOG may follow: stop generating."""
        return bool(self.matcher.is_stopped())

    def is_accepting(self) -> bool:
        """The output so far is a complete match (EOG is allowed now)."""
        return bool(self.matcher.is_accepting())

    @property
    def error(self) -> str | None:
        """Why the constraint broke (a rejected token, a per-step limit), or None."""
        if not self.matcher.is_error():
            return None
        return one_line_reason(self.matcher.get_error() or "the grammar matcher failed")


class BatchMasker:
    """Masks for all constrained slots of a step, computed together by llguidance's
    thread pool into one preallocated array (row i belongs to constraints[i]).

    The pool costs ~50 us per call, more than a typical JSON mask (5-20 us): on a host
    with few cores set `min_parallel_rows` above the slot count to fill in turn; the
    pool pays off when masks are expensive (large lexers, many cores)."""

    def __init__(
        self, n_vocab: int, max_rows: int, n_threads: int | None = None, min_parallel_rows: int = 2
    ) -> None:
        self.n_vocab = n_vocab
        self.bitmask = np.full((max_rows, mask_words(n_vocab)), -1, dtype=np.int32)
        self.min_parallel_rows = min_parallel_rows
        self._executor = LLExecutor(n_threads)
        self._helper: concurrent.futures.ThreadPoolExecutor | None = None

    def fill(self, constraints: Sequence[Constraint]) -> np.ndarray:
        """Compute every constraint's mask; returns the rows, a view of `bitmask`."""
        n = len(constraints)
        if n > len(self.bitmask):
            raise ValueError(f"{n} constraints for a masker of {len(self.bitmask)} rows")
        if n < max(2, self.min_parallel_rows):
            for row, constraint in zip(self.bitmask, constraints):
                constraint.fill_mask(row)
        else:
            self._executor.unsafe_compute_mask_ptr(
                [(c.matcher, i) for i, c in enumerate(constraints)],
                self.bitmask.ctypes.data,
                self.bitmask.shape[1] * 4,
                len(self.bitmask),
            )
        return self.bitmask[:n]

    def fill_async(self, constraints: Sequence[Constraint]) -> concurrent.futures.Future:
        """`fill` on a helper thread, to overlap with `llama_decode` (both drop the GIL).
        Touch neither these constraints nor `bitmask` until the future is done."""
        if self._helper is None:
            self._helper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mlxcel-mask")
        return self._helper.submit(self.fill, list(constraints))

    def apply(self, logits: np.ndarray, row: np.ndarray) -> None:
        apply_mask(logits, row)

    def allows(self, row: np.ndarray, token: int) -> bool:
        return bool((int(row[token // 32]) >> (token % 32)) & 1)

    def close(self) -> None:
        if self._helper is not None:
            self._helper.shutdown(wait=True)
            self._helper = None


def apply_mask(logits: np.ndarray, bitmask_row: np.ndarray) -> None:
    """Set the logits of disallowed tokens to -inf, in place (float32, n_vocab long)."""
    n_vocab = logits.shape[0]
    _check_rows(bitmask_row, mask_words(n_vocab))
    banned = np.unpackbits(np.invert(bitmask_row).view(np.uint8), count=n_vocab, bitorder="little")
    np.copyto(logits, -np.inf, where=banned.view(np.bool_))


def _check_rows(row: np.ndarray, n_words: int) -> None:
    if row.dtype != np.int32 or row.shape != (n_words,) or not row.flags["C_CONTIGUOUS"]:
        raise ValueError(f"a mask row must be a contiguous int32 array of {n_words} words")
