"""What the engine needs from a constrained request (structured output, forced tool
calls): the engine depends on these protocols only, and the implementation
(mlxcel.structured, on llguidance) is handed to it through EngineConfig."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Protocol

import numpy as np


class TokenConstraint(Protocol):
    """One request's grammar state: which tokens may come next."""

    @property
    def error(self) -> str | None:
        """Why the constraint broke, or None."""

    def accept(self, token: int) -> bool:
        """Advance by a sampled token; False when the token breaks the grammar."""

    def is_finished(self) -> bool:
        """Nothing but the end may follow: the generation stops."""


class ConstraintMasker(Protocol):
    """Fills the allowed-token masks of a step's constrained requests, overlapping
    llama_decode, and applies a mask row to a row of logits."""

    def fill_async(self, constraints: Sequence[TokenConstraint]) -> Future:
        """A future of one mask row per constraint, in order."""

    def apply(self, logits: np.ndarray, row: np.ndarray) -> None:
        """Set the logits of disallowed tokens to -inf, in place."""

    def allows(self, row: np.ndarray, token: int) -> bool:
        """Whether the mask `row` lets `token` through."""

    def close(self) -> None: ...


class MaskerFactory(Protocol):
    def __call__(self, n_vocab: int, max_rows: int) -> ConstraintMasker: ...
