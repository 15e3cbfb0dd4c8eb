"""Chat messages as the wire sends them, normalised into what chat templates read.

Every API (OpenAI chat, Responses, Anthropic) produces this same list of plain dicts:
{"role", "content", optional "name", "tool_calls", "tool_call_id", "reasoning_content"}.
"""

from __future__ import annotations

import json
from typing import Any

from mlxcel.chat.errors import ChatInputError

MEDIA_PART_TYPES = {"image_url", "image", "input_image", "video_url", "video", "input_audio", "audio", "file"}
ROLE_ALIASES = {"developer": "system", "function": "tool"}


def content_text(content: Any, where: str) -> str:
    """A string, or an array of text parts joined by newlines. Media on this text-only
    server is a 400 naming the part."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else getattr(part, "type", None)
        text = part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
        if kind in ("text", "input_text", "output_text"):
            texts.append(text or "")
        elif kind in MEDIA_PART_TYPES:
            raise ChatInputError(
                f"{where}.content[{i}]: {kind} input is not supported: the loaded model is text-only",
                code="unsupported_content_type",
            )
        else:
            raise ChatInputError(f"{where}.content[{i}]: unknown content part type {kind!r}")
    return "\n".join(texts)


def _arguments_object(arguments: Any) -> Any:
    """Templates expect tool-call arguments as a mapping; keep text that is not JSON."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return arguments
    return arguments


def normalise_messages(messages: list[dict]) -> list[dict]:
    result = []
    for i, message in enumerate(messages):
        role = ROLE_ALIASES.get(message["role"], message["role"])
        out: dict[str, Any] = {"role": role, "content": content_text(message.get("content"), f"messages[{i}]")}
        if message.get("name"):
            out["name"] = message["name"]
        if message.get("tool_call_id"):
            out["tool_call_id"] = message["tool_call_id"]
        if message.get("reasoning_content"):
            out["reasoning_content"] = message["reasoning_content"]
        if role == "assistant" and message.get("tool_calls"):
            out["tool_calls"] = [
                {
                    "id": call.get("id") or f"call_{i}_{n}",
                    "type": "function",
                    "function": {
                        "name": call["function"]["name"],
                        "arguments": _arguments_object(call["function"].get("arguments", "")),
                    },
                }
                for n, call in enumerate(message["tool_calls"])
            ]
        result.append(out)
    return result


def add_instruction(messages: list[dict], instruction: str) -> list[dict]:
    """The spec's placement: onto the first system message, else the last user
    message, else a new leading system message. The input list is not modified."""
    messages = [dict(m) for m in messages]
    for m in messages:
        if m["role"] == "system":
            m["content"] = f"{m['content']}\n\n{instruction}" if m["content"] else instruction
            return messages
    for m in reversed(messages):
        if m["role"] == "user":
            m["content"] = f"{m['content']}\n\n{instruction}" if m["content"] else instruction
            return messages
    return [{"role": "system", "content": instruction}, *messages]
