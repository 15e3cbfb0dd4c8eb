"""Wire models of the OpenAI Responses API (/v1/responses and its family), and the
JSON shapes of what it returns: response objects, output items, usage."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from mlxcel.turn.null_fields import NullAsAbsent
from mlxcel.turn.sampling_fields import SamplingFields

COMPACT_THRESHOLD_MAX = 100_000_000
COMPACT_MAX_OUTPUT_TOKENS = 16_384


class ContextManagement(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    compact_threshold: int | None = Field(default=None, ge=1, le=COMPACT_THRESHOLD_MAX)
    keep_tokens: int | None = Field(default=None, ge=1)  # mlxcel: as the compact route's
    max_output_tokens: int | None = Field(default=None, ge=1, le=COMPACT_MAX_OUTPUT_TOKENS)  # of the summary


class ResponsesInput(NullAsAbsent, SamplingFields):
    """What /v1/responses and /v1/responses/input_tokens read to build the prompt."""

    model: str | None = None
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    text: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    previous_response_id: str | None = None
    conversation: str | dict[str, Any] | None = None
    truncation: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None

METADATA_MAX_PAIRS, METADATA_MAX_KEY, METADATA_MAX_VALUE = 16, 64, 512


class ResponsesRequest(ResponsesInput):
    context_management: list[ContextManagement] | None = None
    store: StrictBool = True
    stream: StrictBool = False
    background: StrictBool = False
    max_output_tokens: int | None = Field(default=None, ge=1)
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    thinking_budget: int | None = Field(default=None, ge=-1)
    thinking_budget_tokens: int | None = Field(default=None, ge=-1)
    timings_per_token: StrictBool = False  # llama-server: `timings` on each streamed delta event
    return_progress: StrictBool = False  # llama-server: response.in_progress events with prompt_progress
    metadata: dict[str, Any] | None = None
    user: str | None = None

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        """OpenAI's bounds on what a response stores and echoes: at most 16 pairs, keys of
        at most 64 characters, values strings of at most 512."""
        if value is None:
            return value
        if len(value) > METADATA_MAX_PAIRS:
            raise ValueError(f"at most {METADATA_MAX_PAIRS} key-value pairs (got {len(value)})")
        for key, item in value.items():
            if len(key) > METADATA_MAX_KEY:
                raise ValueError(f"a key is longer than {METADATA_MAX_KEY} characters")
            if not isinstance(item, str):
                raise ValueError(f"the value of '{key}' must be a string")
            if len(item) > METADATA_MAX_VALUE:
                raise ValueError(f"the value of '{key}' is longer than {METADATA_MAX_VALUE} characters")
        return value


class CompactRequest(ResponsesInput):
    stream: StrictBool = False
    keep_tokens: int | None = None
    max_output_tokens: int | None = None


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def usage_body(input_tokens: int = 0, output_tokens: int = 0, cached_tokens: int = 0,
               reasoning_tokens: int = 0) -> dict:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def output_text_part(text: str, logprobs: list[dict] | None = None) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def message_item(id: str, text: str, status: str = "completed", logprobs: list[dict] | None = None) -> dict:
    content = [] if status == "in_progress" else [output_text_part(text, logprobs)]
    return {"id": id, "type": "message", "role": "assistant", "status": status, "content": content}


def reasoning_item(id: str, text: str, status: str = "completed") -> dict:
    content = [] if status == "in_progress" else [{"type": "reasoning_text", "text": text}]
    return {"id": id, "type": "reasoning", "summary": [], "content": content, "status": status}


def function_call_item(id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict:
    return {"id": id, "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def compaction_item(id: str, encrypted_content: str) -> dict:
    return {"id": id, "type": "compaction", "encrypted_content": encrypted_content, "created_by": "mlxcel"}


def response_object(
    id: str,
    created_at: int,
    model: str,
    request: ResponsesRequest,
    status: str,
    output: list[dict] | None = None,
    usage: dict | None = None,
    *,
    error: dict | None = None,
    incomplete_details: dict | None = None,
    completed_at: int | None = None,
    conversation_id: str | None = None,
) -> dict:
    """The response object, echoing the request's settings. `background` appears
    only on background responses."""
    body = {
        "id": id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "completed_at": completed_at,
        "error": error,
        "incomplete_details": incomplete_details,
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "model": model,
        "output": output or [],
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": request.previous_response_id,
        "reasoning": request.reasoning or {"effort": None, "summary": None},
        "store": request.store,
        "temperature": request.temperature,
        "text": request.text or _text_of(request),
        "tool_choice": request.tool_choice if request.tool_choice is not None else "auto",
        "tools": request.tools or [],
        "top_logprobs": request.top_logprobs,
        "top_p": request.top_p,
        "truncation": request.truncation or "disabled",
        "usage": usage or usage_body(),
        "user": request.user,
        "metadata": request.metadata or {},
    }
    if conversation_id is not None:
        body["conversation"] = {"id": conversation_id}
    if request.background:
        body["background"] = True
    return body


def _text_of(request) -> dict:
    """The `text` echoed for a request without one: its chat-shaped `response_format`, in
    text.format's shape, else plain text."""
    fmt = (request.model_extra or {}).get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("json_schema"), dict):
        return {"format": {"type": "json_schema", **fmt["json_schema"]}}
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return {"format": {"type": "json_object"}}
    return {"format": {"type": "text"}}
