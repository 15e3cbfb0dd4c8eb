"""`serve` flags for reasoning models, as llama-server names them: how thoughts are
returned (--reasoning-format), whether the template thinks (-rea / --reasoning, its
effort, whether past reasoning is kept), and the default thinking budget."""

from __future__ import annotations

import argparse
from typing import Any

from mlxcel.chat.reasoning import REASONING_FORMATS

BUDGET_MESSAGE_MAX_CHARS = 4096


def _format(value: str) -> str:
    if value not in REASONING_FORMATS:
        raise argparse.ArgumentTypeError(f"must be one of: {', '.join(REASONING_FORMATS)}")
    return value


def _on_off_auto(value: str) -> str:
    """llama-server's truthy / falsey / auto words."""
    word = value.strip().lower()
    if word in ("on", "enabled", "true", "1"):
        return "on"
    if word in ("off", "disabled", "false", "0"):
        return "off"
    if word in ("auto", "-1"):
        return "auto"
    raise argparse.ArgumentTypeError("must be on, off or auto")


def _effort(value: str) -> str:
    if not value.strip() or len(value) > 64:
        raise argparse.ArgumentTypeError("must be a level such as low, medium or high, or 'default'")
    return value.strip()


def _budget(value: str) -> int:
    try:
        budget = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {value!r}") from None
    if budget < -1:
        raise argparse.ArgumentTypeError(f"{value} is out of range (-1 for unrestricted, 0 or more tokens)")
    return budget


def _message(value: str) -> str:
    if len(value) > BUDGET_MESSAGE_MAX_CHARS:
        raise argparse.ArgumentTypeError(f"is longer than {BUDGET_MESSAGE_MAX_CHARS} characters")
    return value


# (flags, dest, type, default, env, help): the shape of serve_args' value options
REASONING_OPTIONS = [
    (("--reasoning-format",), "reasoning_format", _format, "deepseek", "LLAMA_ARG_THINK",
     "how thoughts are returned: none (left in the content), deepseek, deepseek-legacy or auto (in "
     "reasoning_content, thinking blocks and reasoning items); a request's reasoning_format overrides it"),
    (("-rea", "--reasoning"), "reasoning", _on_off_auto, "auto", "LLAMA_ARG_REASONING",
     "whether the chat template thinks: on or off sets its enable_thinking; auto leaves the template's default"),
    (("--reasoning-effort",), "reasoning_effort", _effort, "default", "LLAMA_ARG_REASONING_EFFORT",
     "reasoning effort given to the chat template (reasoning_effort), e.g. low, medium, high; default: the "
     "template's"),
    (("--reasoning-budget",), "reasoning_budget", _budget, -1, "LLAMA_ARG_THINK_BUDGET",
     "default thinking budget in tokens: -1 unrestricted, 0 ends thinking at once; a request's "
     "thinking_budget_tokens / reasoning_budget_tokens overrides it"),
    (("--reasoning-budget-message",), "reasoning_budget_message", _message, "", "LLAMA_ARG_THINK_BUDGET_MESSAGE",
     "text put in the reasoning before the end-of-thinking marker when the budget runs out"),
]

# (positive flags, negative flags, dest, default, environment variable, help)
REASONING_SWITCHES = [
    (("--reasoning-preserve",), ("--no-reasoning-preserve",), "reasoning_preserve", None,
     "LLAMA_ARG_REASONING_PRESERVE",
     "give templates that can keep past reasoning (preserve_reasoning) the whole trace (default: the template's)"),
]


def reasoning_template_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The chat-template variables these flags set (--chat-template-kwargs wins over them)."""
    kwargs: dict[str, Any] = {}
    if args.reasoning != "auto":
        kwargs["enable_thinking"] = args.reasoning == "on"
    if args.reasoning_effort != "default":
        kwargs["reasoning_effort"] = args.reasoning_effort
    if args.reasoning_preserve is not None:
        kwargs["preserve_reasoning"] = args.reasoning_preserve
    return kwargs
