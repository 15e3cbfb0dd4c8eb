"""Wire models of the Anthropic Messages API (/v1/messages, /v1/messages/count_tokens).

Content blocks stay plain dicts here; their translation (anthropic_translation)
checks each one and names the block it rejects."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from mlxcel.turn.null_fields import NullAsAbsent
from mlxcel.turn.sampling_fields import SamplingFields

ContentBlock = dict[str, Any]


class AnthropicMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]

    @field_validator("content")
    @classmethod
    def _typed_blocks(cls, value: str | list[ContentBlock]) -> str | list[ContentBlock]:
        if isinstance(value, list) and any(not isinstance(block.get("type"), str) for block in value):
            raise ValueError("every content block needs a string 'type'")
        return value


class AnthropicTool(BaseModel):
    """A client tool (no `type`, or "custom") has `input_schema`, as Anthropic requires;
    server tools (a versioned `type`: web_search_20250305 ...) do not."""

    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=256)
    type: str | None = None
    description: str | None = None
    input_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _client_tool_has_schema(self) -> AnthropicTool:
        if self.type in (None, "custom") and self.input_schema is None:
            raise ValueError("input_schema: Field required (a client tool declares its input's JSON schema)")
        return self


class ThinkingConfig(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=0)


class CountTokensRequest(NullAsAbsent, SamplingFields):
    """What decides the prompt: shared by count_tokens and messages."""

    model: str | None = None
    messages: list[AnthropicMessage] = Field(min_length=1)
    system: str | list[ContentBlock] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: dict[str, Any] | None = None
    thinking: ThinkingConfig | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: StrictBool = False
    output_config: dict[str, Any] | None = None
    output_format: dict[str, Any] | None = None  # the structured-outputs beta's spelling
    response_format: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None

    @field_validator("stop_sequences")
    @classmethod
    def _check_stop_sequences(cls, value: list[str] | None) -> list[str]:
        return SamplingFields._check_stop(value)

    def engine_fields(self) -> SamplingFields:
        """The sampling fields the engine gets: `stop_sequences` is Anthropic's `stop`."""
        return self.model_copy(update={"stop": self.stop_sequences or []})


def usage_body(prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> dict:
    """Anthropic's split, as llama-server reports it: prompt tokens served from the
    prompt cache are `cache_read_input_tokens`, the rest `input_tokens`."""
    return {"cache_read_input_tokens": cached_tokens, "input_tokens": prompt_tokens - cached_tokens,
            "output_tokens": output_tokens}


def message_body(id: str, model: str, content: list[dict], stop_reason: str | None, stop_sequence: str | None,
                 usage: dict) -> dict:
    return {
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage,
    }
