"""Wire models of OpenAI's legacy text completions (/v1/completions)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, StrictBool

from mlxcel.turn.grammar_fields import GrammarFields
from mlxcel.turn.null_fields import NullAsAbsent
from mlxcel.turn.prompts import PromptField
from mlxcel.turn.sampling_fields import SamplingFields


class StreamOptions(NullAsAbsent):
    model_config = ConfigDict(extra="allow")
    include_usage: StrictBool = False


class CompletionRequest(NullAsAbsent, SamplingFields, GrammarFields):
    model: str | None = None
    prompt: PromptField
    max_tokens: int | None = Field(default=None, ge=-1)
    n_predict: int | None = Field(default=None, ge=-1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=128)
    echo: StrictBool = False
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)
    logprobs: int | None = None  # alternatives per token (at most 20); 0: the tokens' own logprobs only
    user: str | None = None
    response_format: dict[str, Any] | None = None


def completion_choice(index: int, text: str, finish_reason: str | None, logprobs: dict | None = None,
                      stream: bool = False) -> dict:
    """A choice; streamed, its text is also under `delta` (the spec's "same SSE format as
    chat completions, with text instead of content"), OpenAI's `text` kept for its SDKs."""
    choice = {"index": index, "text": text, "finish_reason": finish_reason, "logprobs": logprobs}
    if stream:
        choice["delta"] = {"text": text}
    return choice


def completion_body(
    id: str, created: int, model: str, choices: list[dict], usage: dict | None, stream: bool
) -> dict:
    body = {
        "id": id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
    }
    if usage is not None or not stream:
        body["usage"] = usage
    return body


def usage_body(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
