"""Chat templates: the model's Jinja template rendered as Hugging Face transformers does.

A template is untrusted input (it comes from a model file or an operator's file), so it
runs in jinja2's immutable sandbox; unsafe attribute access raises instead of rendering
empty, string and number blow-ups through ``*``, ``**`` and ``+`` are refused, the output
is capped, and every failure surfaces as one `TemplateError` with a readable message.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, NoReturn

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from mlxcel.chat.reasoning import THINK, ReasoningMarkers

MAX_OUTPUT_CHARS = 8 * 1024 * 1024
_MAX_POW_BITS = 1 << 16

CHATML_TEMPLATE = (
    "{%- for message in messages %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}\n"
    "{%- if message['content'] is string %}{{- message['content'] }}{%- endif %}\n"
    "{{- '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n"
)


class TemplateError(ValueError):
    """A chat template failed to compile or render; the message says why."""


def _raise_exception(message: str) -> NoReturn:
    raise TemplateError(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
    ensure_ascii: bool = False,
) -> str:
    """JSON without HTML or ASCII escaping, as transformers' chat templates expect."""
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


def _too_big(size: int) -> bool:
    return size > MAX_OUTPUT_CHARS


class _ChatTemplateEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox, made strict about unsafe attributes and size blow-ups."""

    intercepted_binops = frozenset(["*", "**", "+"])

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(count, int) and _too_big(len(seq) * count):
                    raise TemplateError("chat template error: repetition result too large")
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
                if right * math.log2(abs(left)) > _MAX_POW_BITS:
                    raise TemplateError("chat template error: power result too large")
        elif operator == "+":
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                if _too_big(len(left) + len(right)):
                    raise TemplateError("chat template error: concatenation result too large")
        return super().call_binop(context, operator, left, right)


def _make_environment() -> _ChatTemplateEnvironment:
    env = _ChatTemplateEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


_ENV = _make_environment()


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
