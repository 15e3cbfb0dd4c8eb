"""Wire models of llama-server's native routes: /completion, /tokenize, /detokenize."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from mlxcel.turn.grammar_fields import GrammarFields
from mlxcel.turn.null_fields import NullAsAbsent
from mlxcel.turn.prompts import PromptField
from mlxcel.turn.sampling_fields import INT32_MAX, SamplingFields

# llama-server's "soft" limits on /completion and /infill: a number outside them is
# clamped, not refused (its -1 for temperature is greedy, a negative top_k is off).
# Every other field keeps its range and a value outside it is a 400 naming the field,
# as on the OpenAI routes.
SOFT_LIMITS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 100.0),
    "top_k": (0, INT32_MAX),
    "top_p": (0.0, 1.0),
    "min_p": (0.0, 1.0),
    "typical_p": (0.0, 1.0),
    "xtc_probability": (0.0, 1.0),
    "xtc_threshold": (0.0, 1.0),
}  # llama-server clamps mirostat too; a mode it does not have (7) is a 400 here


def clamp_soft_limits(body: Any) -> Any:
    """The body with each soft-limited number moved into its range (a copy, when one
    moves); anything else (a string, a bool, NaN) is left for validation to refuse."""
    if not isinstance(body, dict):
        return body
    clamped = {}
    for name, (low, high) in SOFT_LIMITS.items():
        value = body.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            continue
        if value < low or value > high:
            clamped[name] = type(value)(min(max(value, low), high))
    return {**body, **clamped} if clamped else body


class NativeCompletionRequest(NullAsAbsent, SamplingFields, GrammarFields):
    prompt: PromptField
    n_predict: int | None = Field(default=None, ge=-1)
    max_tokens: int | None = Field(default=None, ge=-1)
    stream: StrictBool = False
    return_tokens: StrictBool = False
    response_format: dict[str, Any] | None = None
    n_probs: int | None = None  # > 0: completion_probabilities with the top n_probs tokens
    logprobs: int | None = None  # llama-server reads it when n_probs is absent
    post_sampling_probs: StrictBool = False
    timings_per_token: StrictBool = False
    return_progress: StrictBool = False
    n_cmpl: int | None = Field(default=None, ge=1)  # completions per prompt (llama-server; `n` is its alias)
    n: int | None = Field(default=None, ge=1)
    response_fields: list[str] | None = Field(default=None, max_length=256)

    @model_validator(mode="before")
    @classmethod
    def _soft_limits(cls, body: Any) -> Any:
        return clamp_soft_limits(body)

    def completions_per_prompt(self) -> int:
        return self.n_cmpl if self.n_cmpl is not None else (self.n or 1)

    def wanted_probs(self) -> int | None:
        """n_probs as sent (or its `logprobs` alias)."""
        return self.n_probs if self.n_probs is not None else self.logprobs


class TokenizeRequest(NullAsAbsent):
    model_config = ConfigDict(extra="allow")
    content: str
    add_special: StrictBool = False
    parse_special: StrictBool = True
    with_pieces: StrictBool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    tokens: list[int]
