"""Wire models of llama-server's native routes: /completion, /tokenize, /detokenize."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mlxcel.turn.grammar_fields import GrammarFields
from mlxcel.turn.sampling_fields import SamplingFields

NativePrompt = str | list[int] | list[str | int | list[int]]


class NativeCompletionRequest(SamplingFields, GrammarFields):
    prompt: NativePrompt
    n_predict: int | None = Field(default=None, ge=-1)
    max_tokens: int | None = Field(default=None, ge=-1)
    stream: bool = False
    return_tokens: bool = False
    response_format: dict[str, Any] | None = None


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    tokens: list[int]
