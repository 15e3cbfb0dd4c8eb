"""Wire models of OpenAI chat completions (/v1/chat/completions)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from mlxcel.api.openai.completions_wire import StreamOptions
from mlxcel.turn.chat_turn import ChatOutcome
from mlxcel.turn.grammar_fields import GrammarFields
from mlxcel.turn.null_fields import NullAsAbsent
from mlxcel.turn.sampling_fields import SamplingFields


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None

    @model_validator(mode="after")
    def _text_has_text(self) -> ContentPart:
        if self.type == "text" and self.text is None:
            raise ValueError("a text part needs its 'text'")
        return self


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    arguments: str | dict[str, Any] = ""


class AssistantToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str | None = None
    type: str = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[AssistantToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    @model_validator(mode="after")
    def _says_something(self) -> ChatMessage:
        """llama-server's rule: 'content' (null allowed) or 'tool_calls' (or the legacy
        'function_call'); a message with neither is malformed."""
        sent = self.model_fields_set
        if "content" not in sent and "tool_calls" not in sent and "function_call" not in (self.model_extra or {}):
            raise ValueError("expected 'content' or 'tool_calls'")
        return self


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=256)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: StrictBool | None = None


class ToolDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str = "function"
    function: FunctionDefinition


class PredictionPart(BaseModel):
    type: Literal["text"]
    text: str


class Prediction(BaseModel):
    """OpenAI's predicted output: text the reply is expected to repeat (an edited file,
    say), drafted from while the reply follows it."""

    type: Literal["content"]
    content: str | list[PredictionPart]

    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(part.text for part in self.content)


def completion_details(outcomes: list[ChatOutcome]) -> dict:
    """usage.completion_tokens_details, as OpenAI's: the tokens the reasoning block took,
    and of a request's prediction the drafted tokens the reply kept and those it did not
    (0 without one)."""
    return {
        "reasoning_tokens": sum(o.final.reasoning_tokens for o in outcomes),
        "accepted_prediction_tokens": sum(o.finish.timings.prediction_accepted for o in outcomes),
        "rejected_prediction_tokens": sum(o.finish.timings.prediction_rejected for o in outcomes),
    }


class ChatCompletionRequest(NullAsAbsent, SamplingFields, GrammarFields):
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=-1)
    max_completion_tokens: int | None = Field(default=None, ge=-1)
    n_predict: int | None = Field(default=None, ge=-1)
    n: int = Field(default=1, ge=1, le=128)
    logprobs: StrictBool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[ToolDefinition] | None = None
    functions: list[FunctionDefinition] | None = None  # OpenAI's legacy function calling (legacy_functions.py)
    function_call: str | dict[str, Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    prediction: Prediction | None = None
    parallel_tool_calls: StrictBool | None = None
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    dry_run: StrictBool = False  # 003: the admission estimate instead of a generation
    reasoning_effort: str | None = None
    reasoning: dict[str, Any] | None = None
    enable_thinking: StrictBool | None = None
    thinking_budget: int | None = Field(default=None, ge=-1)
    thinking_budget_tokens: int | None = Field(default=None, ge=-1)
    reasoning_budget_tokens: int | None = Field(default=None, ge=-1)  # llama-server's name
    reasoning_budget_message: str | None = Field(default=None, max_length=4096)
    reasoning_control: bool = False  # llama-server's: POST /v1/chat/completions/control may end the reasoning
    reasoning_format: Literal["none", "auto", "deepseek", "deepseek-legacy"] | None = None  # None: the server's
    timings_per_token: StrictBool = False
    return_progress: StrictBool = False  # stream prompt_progress chunks while the prompt prefills
    verbose: StrictBool | None = None  # None: the server's --verbose
    add_generation_prompt: StrictBool | None = None  # None: true
    continue_final_message: Any = None  # true, "content" or "reasoning_content" (llama-server's parse)
    user: str | None = None
    metadata: dict[str, Any] | None = None


def chat_message(content: str | None, reasoning: str | None, tool_calls: list[dict] | None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def chat_body(id: str, created: int, model: str, choices: list[dict], usage: dict | None) -> dict:
    return {
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
        "usage": usage,
    }


def chunk_body(id: str, created: int, model: str, choices: list[dict], usage: dict | None = None) -> dict:
    body = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    return body


def logprob_entry(token_text: str, token_bytes: list[int], logprob: float, top: list[dict]) -> dict:
    return {"token": token_text, "logprob": logprob, "bytes": token_bytes, "top_logprobs": top}
