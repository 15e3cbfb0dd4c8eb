"""Simulated constrained generation: walk a grammar token by token, choosing among
the tokens its mask allows, the way the engine samples from masked logits."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mlxcel.engine.tokenizer import Tokenizer
from mlxcel.structured import Constraint, apply_mask, mask_words

Chooser = Callable[[np.ndarray], int]  # mask row -> token


def allowed_tokens(row: np.ndarray, n_vocab: int) -> np.ndarray:
    bits = np.unpackbits(row.view(np.uint8), count=n_vocab, bitorder="little")
    return np.flatnonzero(bits)


def lowest_allowed(n_vocab: int) -> Chooser:
    def choose(row: np.ndarray) -> int:
        return int(allowed_tokens(row, n_vocab)[0])

    return choose


def random_logits(seed: int, piece_lengths: np.ndarray, short_bonus: float = 4.0) -> Chooser:
    """Greedy over random logits after apply_mask; single-byte tokens get a bonus so
    strings and numbers end in a few dozen tokens rather than thousands."""
    rng = np.random.default_rng(seed)
    bonus = np.where(piece_lengths == 1, short_bonus, 0.0).astype(np.float32)

    def choose(row: np.ndarray) -> int:
        logits = rng.standard_normal(len(piece_lengths), dtype=np.float32) + bonus
        apply_mask(logits, row)
        return int(np.argmax(logits))

    return choose


def walk(constraint: Constraint, tokenizer: Tokenizer, choose: Chooser, max_steps: int = 4000) -> str:
    """Generate until the grammar is finished (or an EOG is chosen); return the text."""
    row = np.zeros(mask_words(tokenizer.n_vocab), dtype=np.int32)
    out: list[bytes] = []
    for _ in range(max_steps):
        if constraint.is_finished():
            break
        constraint.fill_mask(row)
        assert constraint.error is None, constraint.error
        token = choose(row)
        assert (row[token // 32] >> (token % 32)) & 1, "chose a disallowed token"
        if tokenizer.is_eog(token):
            assert constraint.is_accepting()
            break
        assert constraint.accept(token), constraint.error
        out.append(tokenizer.piece(token))
    else:
        raise AssertionError(f"not finished after {max_steps} tokens: {b''.join(out)[:200]!r}")
    return b"".join(out).decode("utf-8")
