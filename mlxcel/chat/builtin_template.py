"""llama.cpp's built-in chat templates (llama-server's --no-jinja): the template text,
or a built-in name such as `chatml` or `llama3`, is matched by llama.cpp's
`llama_chat_apply_template` against the formats it knows, and that format renders
each message's role and text. As in llama-server: text parts are joined with newlines,
tool calls and template variables are not rendered, a request with tools is refused,
and the output is all content (no reasoning block is parsed)."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

import llama_cpp

from mlxcel.chat.reasoning import THINK, ReasoningMarkers
from mlxcel.chat.template import MAX_OUTPUT_CHARS, TemplateError

_PROBE = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]


def builtin_names() -> list[str]:
    """The names of llama.cpp's built-in templates."""
    n = llama_cpp.llama_chat_builtin_templates(None, 0)
    names = (ctypes.c_char_p * n)()
    llama_cpp.llama_chat_builtin_templates(names, n)
    return [name.decode() for name in names]


class BuiltinTemplate:
    """`template` (text or a built-in name) rendered by llama.cpp's matcher; a
    TemplateError at once when llama.cpp knows no format like it."""

    jinja = False
    supports_thinking = False
    reasoning_markers: ReasoningMarkers = THINK

    def __init__(self, template: str) -> None:
        self.source = template
        self._encoded = template.encode("utf-8")
        try:
            self.render(_PROBE)
        except TemplateError:
            raise TemplateError("llama.cpp has no built-in chat template like this one (--no-jinja); "
                                f"its built-in ones: {', '.join(builtin_names())}") from None

    def render(self, messages: Sequence[Mapping[str, Any]], /, *, tools: Sequence[Mapping[str, Any]] | None = None,
               add_generation_prompt: bool = True, **_variables: Any) -> str:
        """The prompt text of the messages' roles and contents (a content that is a
        list of parts keeps its text parts, joined with newlines)."""
        if tools:
            raise TemplateError("tools param requires --jinja flag")
        roles = [str(message.get("role", "")).encode("utf-8", "replace") for message in messages]
        contents = [_text(message.get("content")).encode("utf-8", "replace") for message in messages]
        chat = (llama_cpp.llama_chat_message * len(messages))(
            *(llama_cpp.llama_chat_message(role=r, content=c) for r, c in zip(roles, contents)))
        size = sum(len(r) + len(c) for r, c in zip(roles, contents))
        size += size // 4 + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_chat_apply_template(self._encoded, chat, len(messages), add_generation_prompt, buf,
                                                    size)
            if n < 0:
                raise TemplateError("this chat template is not one of llama.cpp's built-in ones, try using --jinja")
            if n > MAX_OUTPUT_CHARS:
                raise TemplateError(f"chat template error: output exceeds {MAX_OUTPUT_CHARS} characters")
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n
        raise TemplateError("the chat template's output kept growing")


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content
                         if isinstance(part, Mapping) and part.get("type") == "text")
    return str(content)
