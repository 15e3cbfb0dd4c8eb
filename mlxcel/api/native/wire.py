"""Wire models of llama-server's native routes: /completion, /tokenize, /detokenize."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool

from mlxcel.turn.grammar_fields import GrammarFields
from mlxcel.turn.prompts import PromptField
from mlxcel.turn.sampling_fields import SamplingFields


class NativeCompletionRequest(SamplingFields, GrammarFields):
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

    def completions_per_prompt(self) -> int:
        return self.n_cmpl if self.n_cmpl is not None else (self.n or 1)

    def wanted_probs(self) -> int | None:
        """n_probs as sent (or its `logprobs` alias)."""
        return self.n_probs if self.n_probs is not None else self.logprobs


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str
    add_special: StrictBool = False
    parse_special: StrictBool = True
    with_pieces: StrictBool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    tokens: list[int]
