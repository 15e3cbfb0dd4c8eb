"""Chat messages as the wire sends them, normalised into what chat templates read.

Every API (OpenAI chat, Responses, Anthropic) produces this same list of plain dicts:
{"role", "content", optional "name", "tool_calls", "tool_call_id", "reasoning_content"}.
"""

from __future__ import annotations

import json
from typing import Any

from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.media_parts import MEDIA_PART_TYPES, SENT_AT, MediaIntake, join_parts, unsupported

ROLE_ALIASES = {"developer": "system", "function": "tool"}


def content_text(content: Any, where: str, media: MediaIntake | None = None) -> str:
    """A string, or an array of text parts joined by newlines. A media part becomes
    the media marker, recorded in `media`, when the model takes its kind; else (and
    always without `media`) it is a 400 naming the part."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts: list[tuple[str, bool]] = []
    for i, part in enumerate(content):
        if not isinstance(part, dict) and hasattr(part, "model_dump"):
            part = part.model_dump(exclude_none=True)
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("text", "input_text", "output_text"):
            texts.append((part.get("text") or "", False))
        elif kind in MEDIA_PART_TYPES:
            at = part.get(SENT_AT) or f"{where}.content[{i}]"
            if media is None:
                raise unsupported(kind, at, None)
            texts.append((media.take(part, at), True))
        else:
            raise ChatInputError(f"{where}.content[{i}]: unknown content part type {kind!r}")
    if any(is_marker for _, is_marker in texts):
        return join_parts(texts)
    return "\n".join(text for text, _ in texts)


def _arguments_object(arguments: Any, where: str) -> Any:
    """Templates expect tool-call arguments as a mapping; keep text that is not JSON
    (an integer past Python's digit limit included), refuse what the parser cannot nest."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except RecursionError:
            raise ChatInputError(f"{where}: the JSON is nested too deeply") from None
        except ValueError:
            return arguments
    return arguments


def normalise_messages(messages: list[dict], media: MediaIntake | None = None) -> list[dict]:
    result = []
    for i, message in enumerate(messages):
        role = ROLE_ALIASES.get(message["role"], message["role"])
        out: dict[str, Any] = {"role": role, "content": content_text(message.get("content"), f"messages[{i}]", media)}
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
                        "arguments": _arguments_object(call["function"].get("arguments", ""),
                                                       f"messages[{i}].tool_calls[{n}].function.arguments"),
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
