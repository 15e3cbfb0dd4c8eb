"""Chat-template kwargs: the server-wide defaults and the per-request shapes.

A request names them in one of three shapes, first match winning:

1. ``chat_template_kwargs`` at the top level (llama.cpp);
2. ``extra_body.chat_template_kwargs`` (vLLM / OpenAI SDK users who send ``extra_body``
   literally);
3. ``preserve_thinking`` alone (DashScope), nested in ``extra_body`` or, as the OpenAI
   SDK flattens ``extra_body``, at the top level.

The winner is merged over the server defaults: request keys win, other defaults stay,
unknown keys pass through to the template untouched. The variables the request itself
sets (`RENDER_VARIABLES`) cannot be set again as kwargs: a 400, or a refusal at start.
"""

from __future__ import annotations

import json
import math
from typing import Any

from mlxcel.chat.errors import ChatInputError

PRESERVE_THINKING = "preserve_thinking"
# the template variables every render sets from the request (its messages, its tools, and
# whether the prompt ends with the assistant's turn opened)
RENDER_VARIABLES = ("messages", "tools", "add_generation_prompt")


def resolve_template_kwargs(body: dict[str, Any], server_defaults: dict[str, Any]) -> dict[str, Any]:
    """The kwargs to render this request's template with. ChatInputError (a 400 on
    every API) on a malformed shape."""
    return {**server_defaults, **_request_kwargs(body)}


def _request_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    top = body.get("chat_template_kwargs")
    if top is not None:
        return _object(top, "chat_template_kwargs")
    extra = body.get("extra_body")
    if not isinstance(extra, dict):
        extra = {}
    nested = extra.get("chat_template_kwargs")
    if nested is not None:
        return _object(nested, "extra_body.chat_template_kwargs")
    for where, holder in (("extra_body.", extra), ("", body)):
        value = holder.get(PRESERVE_THINKING)
        if value is not None:
            if not isinstance(value, bool):
                raise ChatInputError(f"{where}{PRESERVE_THINKING} must be a boolean")
            return {PRESERVE_THINKING: value}
    return {}


def _object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ChatInputError(f"{name} must be a JSON object")
    reserved = settable_problem(value, name)
    if reserved:
        raise ChatInputError(reserved)
    return dict(value)


def settable_problem(kwargs: dict[str, Any], name: str) -> str | None:
    """Why `kwargs` (named `name`) cannot be rendered with, or None: it sets one of the
    variables the request itself sets."""
    taken = [key for key in RENDER_VARIABLES if key in kwargs]
    if not taken:
        return None
    return (f"{name} cannot set {', '.join(repr(key) for key in taken)}: the request sets "
            f"{'it' if len(taken) == 1 else 'them'} (messages, tools and add_generation_prompt are request fields)")


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _finite(number: str) -> float:
    """A JSON number as a float; one beyond a double's range (1e999) is refused, not read
    as infinity, which no JSON answer could carry."""
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(f"{number} is out of a double's range")
    return value


def parse_kwargs_json(text: str) -> dict[str, Any]:
    """``--chat-template-kwargs`` / ``LLAMA_ARG_CHAT_TEMPLATE_KWARGS``: a JSON object."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--chat-template-kwargs is not valid JSON: {exc.msg} (column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ValueError(f"--chat-template-kwargs is not valid JSON: {reason}") from None
    if not isinstance(value, dict):
        raise ValueError(f"--chat-template-kwargs must be a JSON object, not {_json_kind(value)}")
    reserved = settable_problem(value, "--chat-template-kwargs")
    if reserved:
        raise ValueError(reserved)
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"
