"""How a chat prompt ends, as llama-server decides it: with the assistant's generation
prompt (the default), with nothing (`add_generation_prompt: false`), or continuing the
final message (`continue_final_message`, vLLM's name, or llama-server's assistant
prefill when the last message is the assistant's).

A continued message is not rendered as a finished turn: the prompt is the template
over the messages before it, then the generation prompt, then the message's text, so
the reply carries on from where that text stops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.reasoning import ReasoningMarkers

CONTENT = "content"
REASONING = "reasoning_content"


@dataclass(frozen=True)
class PromptEnding:
    add_generation_prompt: bool = True
    continue_final: str | None = None  # None, CONTENT or REASONING: what the last message continues


def _continue_mode(value: Any) -> str | None:
    """llama-server's parse: true → auto, "content" / "reasoning_content" → that part,
    anything else → no continuation."""
    if value is True:
        return "auto"
    if value in (CONTENT, REASONING):
        return value
    return None


def resolve_ending(
    messages: list[dict],
    add_generation_prompt: bool | None,
    continue_final_message: Any,
    prefill_assistant: bool,
) -> PromptEnding:
    """The ending a request asks for; a contradiction is a 400 with llama-server's
    message. `messages` are the request's, as sent (role/content/tool_calls)."""
    add_prompt = True if add_generation_prompt is None else add_generation_prompt
    mode = _continue_mode(continue_final_message)
    last = messages[-1] if messages else None
    if mode is None and prefill_assistant and last is not None and last.get("role") == "assistant":
        if len(messages) >= 2 and messages[-2].get("role") == "assistant":
            raise ChatInputError("Cannot have 2 or more assistant messages at the end of the list.")
        mode, add_prompt = "auto", False
    if mode is not None and add_prompt:
        raise ChatInputError("Cannot set both add_generation_prompt and continue_final_message to true.")
    if mode is not None and last is not None and last.get("role") == "assistant" and last.get("tool_calls"):
        raise ChatInputError("Cannot continue an assistant message that contains tool calls.")
    if mode == "auto":
        only_reasoning = last is not None and bool(last.get("reasoning_content")) and not last.get("content")
        mode = REASONING if only_reasoning else CONTENT
    return PromptEnding(add_generation_prompt=add_prompt, continue_final=mode if last is not None else None)


def generation_prompt(with_prompt: str, without_prompt: str) -> str:
    """What the generation prompt adds: the rendering with it past the common prefix."""
    n = 0
    limit = min(len(with_prompt), len(without_prompt))
    while n < limit and with_prompt[n] == without_prompt[n]:
        n += 1
    return with_prompt[n:]


def continued_text(gen_prompt: str, message: dict, mode: str, markers: ReasoningMarkers, thinking: bool) -> str:
    """The text after the earlier messages: the generation prompt, then (on templates
    with reasoning blocks) the message's reasoning in an open block, closed when the
    content follows, then the content."""
    text = gen_prompt
    if thinking:
        at = text.find(markers.open)
        text = (text[:at] if at >= 0 else text) + markers.open + (message.get("reasoning_content") or "")
        if mode == CONTENT:
            text += markers.close
    if mode == CONTENT:
        text += message.get("content") or ""
    return text
