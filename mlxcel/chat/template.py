"""Chat templates: the model's Jinja template rendered as Hugging Face transformers does,
in the sandbox of `template_sandbox` (a template is untrusted input), its output capped
and every failure one `TemplateError` with a readable message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2

from mlxcel.chat.reasoning import THINK, ReasoningMarkers
from mlxcel.chat.template_sandbox import (
    MAX_OUTPUT_CHARS,
    TemplateError,
    TemplateTimeout,
    make_environment,
    render_deadline,
)

RENDER_SECONDS = 10.0  # real templates render in milliseconds; this stops one that would never end

CHATML_TEMPLATE = (
    "{%- for message in messages %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}\n"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- endif %}\n"
    "{{- '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
)

_ENV = make_environment()


def _describe(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "chat template error: recursion too deep"
    if isinstance(exc, jinja2.TemplateError):
        return f"chat template error: {exc.message or type(exc).__name__}"
    return f"chat template error: {type(exc).__name__}: {exc}"


class ChatTemplate:
    """A compiled chat template plus the special tokens it is rendered with."""

    jinja = True  # rendered by Jinja (builtin_template.py renders with llama.cpp's formats)

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template = _ENV.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"chat template syntax error at line {exc.lineno}: {exc.message}") from None
        except Exception as exc:  # a template deep enough to exhaust the parser, etc.
            raise TemplateError(_describe(exc)) from None

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        /,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        """The prompt text. `tools` reaches the template only when non-empty; extra
        kwargs (``enable_thinking``, ...) become template variables."""
        variables: dict[str, Any] = {"bos_token": self.bos_token, "eos_token": self.eos_token, **kwargs}
        variables["messages"] = messages
        variables["add_generation_prompt"] = add_generation_prompt
        if tools:
            variables["tools"] = tools
        pieces: list[str] = []
        size = 0
        try:
            with render_deadline(RENDER_SECONDS):
                for piece in self._template.generate(variables):
                    size += len(piece)
                    if size > MAX_OUTPUT_CHARS:
                        raise TemplateError(f"chat template error: output exceeds {MAX_OUTPUT_CHARS} characters")
                    pieces.append(piece)
        except TemplateError:
            raise
        except Exception as exc:
            raise TemplateError(_describe(exc)) from None
        return "".join(pieces)

    @property
    def reasoning_markers(self) -> ReasoningMarkers:
        """The markers of this template's reasoning blocks."""
        return THINK

    @cached_property
    def supports_thinking(self) -> bool:
        """The template knows think blocks or an ``enable_thinking`` switch."""
        return self.reasoning_markers.open in self.source or "enable_thinking" in self.source


def load_chat_template(
    gguf_template: str | None,
    override_path: str | None,
    bos_token: str = "",
    eos_token: str = "",
) -> ChatTemplate:
    """The operator's ``--chat-template FILE`` if given, else the model's own, else ChatML."""
    if override_path:
        path = Path(override_path).expanduser()
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise TemplateError(f"cannot read chat template file {path}: {reason}") from None
        try:
            return ChatTemplate(source, bos_token=bos_token, eos_token=eos_token)
        except TemplateError as exc:
            raise TemplateError(f"{path}: {exc}") from None
    source = gguf_template if gguf_template and gguf_template.strip() else CHATML_TEMPLATE
    return ChatTemplate(source, bos_token=bos_token, eos_token=eos_token)


__all__ = ["CHATML_TEMPLATE", "MAX_OUTPUT_CHARS", "RENDER_SECONDS", "ChatTemplate", "TemplateError", "TemplateTimeout",
           "load_chat_template"]
