"""Anthropic Messages at the edge of a chat turn: the request translated into a
`ChatTurnSpec` (normalised messages, OpenAI-shaped tools and tool_choice, thinking,
structured output) and the parsed output back into content blocks and a stop reason."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

from mlxcel.api.anthropic.wire import AnthropicMessage, AnthropicTool, CountTokensRequest, MessagesRequest
from mlxcel.chat.continuation import resolve_ending
from mlxcel.chat.deltas import ToolCall
from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.media_parts import sent_at
from mlxcel.chat.output import FinalChat
from mlxcel.chat.template_kwargs import resolve_template_kwargs
from mlxcel.engine.request import FinishReason
from mlxcel.structured.grammar import ResponseFormat
from mlxcel.turn.chat_turn import ChatOutcome, ChatTurnSpec

log = logging.getLogger("mlxcel.anthropic")

MEDIA_BLOCK_TYPES = {"image", "document"}
IMAGE_MEDIA_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}


# --- request -----------------------------------------------------------------

def _media_error(kind: str, where: str) -> ChatInputError:
    return ChatInputError(f"{where}: {kind} blocks are not supported here (images go in a user message's content)",
                          code="unsupported_content_type")


def _is_server_tool_block(kind: str) -> bool:
    """server_tool_use, web_search_tool_result, mcp_tool_use ...: blocks of tools this
    server never runs (they are dropped from requests), so history drops them too."""
    return kind not in ("tool_use", "tool_result") and kind.endswith(("_tool_use", "_tool_result"))


def _text_of(block: dict, where: str) -> str:
    kind = block.get("type")
    if not isinstance(kind, str):  # system blocks and tool_result parts arrive unchecked
        raise ChatInputError(f"{where}.type must be a string")
    if kind == "text":
        text = block.get("text")
        if "text" not in block:
            raise ChatInputError(f"{where}.text: Field required")  # Anthropic's 400
        if not isinstance(text, str):
            raise ChatInputError(f"{where}.text must be a string")
        return text
    if kind in MEDIA_BLOCK_TYPES:
        raise _media_error(kind, where)
    raise ChatInputError(f"{where}: content block type {kind!r} is not allowed here")


def system_text(system: str | list[dict] | None) -> str | None:
    if system is None or isinstance(system, str):
        return system or None
    return "\n".join(_text_of(block, f"system[{i}]") for i, block in enumerate(system)) or None


def _tool_result_content(block: dict, where: str) -> str | list[dict]:
    """A tool_result's content for the tool message: its text parts concatenated as
    llama-server does, or content parts when it holds images (a screenshot tool's),
    which the chat layer places like a user message's."""
    content = block.get("content")
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list) or not all(isinstance(part, dict) for part in content):
        raise ChatInputError(f"{where}.content must be a string or an array of content blocks")
    parts = []
    for i, part in enumerate(content):
        at = f"{where}.content[{i}]"
        if part.get("type") == "image":
            parts.append(sent_at(image_part(part, at), at))
        else:
            parts.append({"type": "text", "text": _text_of(part, at)})
    if any(part["type"] != "text" for part in parts):
        return parts
    return "".join(part["text"] for part in parts)


def image_part(block: dict, where: str) -> dict:
    """An image block as the chat content part it stands for: a base64 source becomes
    a data URI, a url source its URL."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise ChatInputError(f"{where}.source must be an object")
    kind = source.get("type")
    if kind == "base64":
        media_type, data = source.get("media_type"), source.get("data")
        if media_type not in IMAGE_MEDIA_TYPES:
            raise ChatInputError(f"{where}.source.media_type must be one of {', '.join(sorted(IMAGE_MEDIA_TYPES))}")
        if not isinstance(data, str) or not data:
            raise ChatInputError(f"{where}.source.data must be a non-empty base64 string")
        return {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}}
    if kind == "url":
        url = source.get("url")
        if not isinstance(url, str) or not url:
            raise ChatInputError(f"{where}.source.url must be a non-empty string")
        return {"type": "image_url", "image_url": {"url": url}}
    raise ChatInputError(f"{where}.source.type must be 'base64' or 'url'")


def _user_messages(blocks: list[dict], where: str, tool_names: dict[str, str]) -> list[dict]:
    """Tool results become `tool` messages (first, as templates expect them right
    after the calls); the rest of the turn is one user message (content parts when it
    holds images)."""
    results, texts, parts = [], [], []
    for i, block in enumerate(blocks):
        at = f"{where}.content[{i}]"
        kind = block["type"]
        if kind == "tool_result":
            call_id = block.get("tool_use_id")
            if not isinstance(call_id, str) or not call_id:
                raise ChatInputError(f"{at}.tool_use_id is required")
            result = {"role": "tool", "tool_call_id": call_id, "content": _tool_result_content(block, at)}
            if call_id in tool_names:
                result["name"] = tool_names[call_id]
            results.append(result)
        elif kind == "image":
            parts.append(sent_at(image_part(block, at), at))
        elif not _is_server_tool_block(kind):
            texts.append(_text_of(block, at))
            parts.append({"type": "text", "text": texts[-1]})
    if len(parts) > len(texts):  # images: the chat layer places each one
        results.append({"role": "user", "content": parts})
    elif texts or not results:
        results.append({"role": "user", "content": "\n".join(texts)})
    return results


def _assistant_message(blocks: list[dict], where: str, tool_names: dict[str, str]) -> dict:
    texts, thoughts, calls = [], [], []
    for i, block in enumerate(blocks):
        at = f"{where}.content[{i}]"
        kind = block["type"]
        if kind == "thinking":
            thinking = block.get("thinking", "")
            if not isinstance(thinking, str):
                raise ChatInputError(f"{at}.thinking must be a string")
            thoughts.append(thinking)
        elif kind == "tool_use":
            call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
            if not isinstance(name, str) or not name:
                raise ChatInputError(f"{at}.name is required")
            if not isinstance(arguments, dict):
                raise ChatInputError(f"{at}.input must be an object")
            call_id = call_id if isinstance(call_id, str) and call_id else f"toolu_{len(tool_names)}"
            tool_names[call_id] = name
            calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
        elif kind != "redacted_thinking" and not _is_server_tool_block(kind):
            texts.append(_text_of(block, at))
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
    if thoughts:
        message["reasoning_content"] = "\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def chat_messages(system: str | list[dict] | None, messages: list[AnthropicMessage]) -> list[dict]:
    """Anthropic's system and messages as the normalised chat messages templates read."""
    result: list[dict] = []
    instructions = system_text(system)
    if instructions:
        result.append({"role": "system", "content": instructions})
    tool_names: dict[str, str] = {}  # tool_use id -> function name, for the results
    for n, message in enumerate(messages):
        where = f"messages[{n}]"
        if isinstance(message.content, str):
            result.append({"role": message.role, "content": message.content})
        elif message.role == "user":
            result.extend(_user_messages(message.content, where, tool_names))
        else:
            result.append(_assistant_message(message.content, where, tool_names))
    return result


def chat_tools(tools: list[AnthropicTool] | None) -> list[dict]:
    """Client tools in the OpenAI function shape; server tools (no input_schema) dropped."""
    kept = []
    for tool in tools or []:
        if tool.input_schema is None:
            continue
        function = {"name": tool.name, "parameters": tool.input_schema}
        if tool.description:
            function["description"] = tool.description
        kept.append({"type": "function", "function": function})
    return kept


def chat_tool_choice(choice: dict | None, tools: list[dict]) -> Any:
    """auto / any / tool / none onto the chat rules: any is "required", tool is named."""
    if choice is None:
        return None
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        if not tools:
            raise ChatInputError("tool_choice {'type': 'any'} needs at least one tool with an input_schema")
        return "required"
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name") or ""}}
    raise ChatInputError("tool_choice.type must be one of 'auto', 'any', 'tool', 'none'")


def max_tool_calls(choice: dict | None) -> int | None:
    """tool_choice.disable_parallel_tool_use: at most one tool_use block."""
    disable = (choice or {}).get("disable_parallel_tool_use", False)
    if not isinstance(disable, bool):
        raise ChatInputError("tool_choice.disable_parallel_tool_use must be a boolean")
    return 1 if disable else None


def template_kwargs(data: dict, body: CountTokensRequest, server_defaults: dict) -> dict:
    kwargs = resolve_template_kwargs(data, server_defaults)
    if body.thinking is not None:
        kwargs["enable_thinking"] = body.thinking.type != "disabled"
    return kwargs


def thinking_budget(body: CountTokensRequest) -> int | None:
    thinking = body.thinking
    return thinking.budget_tokens if thinking is not None and thinking.type == "enabled" else None


def response_format(body: MessagesRequest) -> dict | None:
    """output_config.format (or the beta's output_format) is a flattened json_schema
    response_format; an OpenAI-style response_format is honoured too. Its shape is checked
    here, so that an error names the field the client sent."""
    for field, fmt in (("output_config.format", (body.output_config or {}).get("format")),
                       ("output_format", body.output_format), ("response_format", body.response_format)):
        if fmt:
            ResponseFormat.parse(fmt, field)
            return fmt
    return None


def turn_spec(data: dict, body: CountTokensRequest, server_template_kwargs: dict,
              prefill_assistant: bool = True) -> ChatTurnSpec:
    """The chat turn a request asks for; a count_tokens body gives the same prompt. A
    final assistant message is a prefill the reply continues (as in llama-server)."""
    tools = chat_tools(body.tools)
    messages = chat_messages(body.system, body.messages)
    spec = ChatTurnSpec(
        messages=messages,
        ending=resolve_ending(messages, None, None, prefill_assistant),
        sampling=body,
        tools=tools,
        tool_choice=chat_tool_choice(body.tool_choice, tools),
        template_kwargs=template_kwargs(data, body, server_template_kwargs),
        thinking_budget=thinking_budget(body),
        max_tool_calls=max_tool_calls(body.tool_choice),
    )
    if isinstance(body, MessagesRequest):
        spec.sampling = body.engine_fields()
        spec.max_tokens = body.max_tokens
        spec.response_format = response_format(body)
    return spec


# --- response ----------------------------------------------------------------

def tool_use_id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


def tool_input(arguments: str) -> dict:
    """A call's JSON arguments as the input object (empty when they are not one, or
    hold what Python's parser refuses: an integer past its digit limit, deep nesting)."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        log.warning("tool call arguments are not a JSON object: %r", arguments[:200])
        return {}
    return value


def thinking_signature(thinking: str) -> str:
    """Anthropic signs thinking blocks; here the field is only a stable digest."""
    return hashlib.sha256(thinking.encode("utf-8")).hexdigest()


def tool_use_block(call: ToolCall) -> dict:
    return {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name, "input": tool_input(call.arguments)}


def content_blocks(final: FinalChat) -> list[dict]:
    """thinking, text, tool_use: whitespace-only text makes no block (as in streams)."""
    blocks = []
    if final.reasoning.strip():
        signature = thinking_signature(final.reasoning)
        blocks.append({"type": "thinking", "thinking": final.reasoning, "signature": signature})
    if final.content.strip():
        blocks.append({"type": "text", "text": final.content})
    blocks.extend(tool_use_block(call) for call in final.tool_calls)
    return blocks


def stop_reason(outcome: ChatOutcome) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence): max_tokens before tool_use, as in llama-server, since
    a tool_use block max_tokens cut off holds no whole input."""
    if outcome.finish.reason is FinishReason.LENGTH:
        return "max_tokens", None
    if outcome.final.tool_calls:
        return "tool_use", None
    if outcome.finish.stop_word is not None:
        return "stop_sequence", outcome.finish.stop_word
    return "end_turn", None
