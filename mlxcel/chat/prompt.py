"""From a chat request to prompt tokens: messages normalised, prior reasoning
stripped, tools planned, the template rendered, the text tokenized."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlxcel.chat.builtin_template import BuiltinTemplate
from mlxcel.chat.continuation import PromptEnding, continued_text, generation_prompt
from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.media_parts import MediaIntake
from mlxcel.chat.messages import add_instruction, normalise_messages
from mlxcel.chat.reasoning import ReasoningMarkers, strip_prior_reasoning
from mlxcel.chat.template import ChatTemplate
from mlxcel.chat.tool_choice import ToolPlan, plan_tools
from mlxcel.engine.tokenizer import Tokenizer


@dataclass
class PreparedChat:
    prompt: str
    tokens: list[int]  # with media: empty until the projector has tokenized `prompt`
    plan: ToolPlan
    parse_reasoning: bool  # the output may carry a reasoning block
    start_in_reasoning: bool  # the generation prompt already opened it
    markers: ReasoningMarkers  # what opens and closes the reasoning block
    add_special: bool = True  # the prompt gets the tokenizer's BOS (it does not start with it)
    media: MediaIntake | None = None  # media parts, each a marker in `prompt`, in order


def prepare_chat(
    template: ChatTemplate | BuiltinTemplate,
    tokenizer: Tokenizer,
    messages: list[dict],
    tools: list[dict] | None,
    tool_choice: Any,
    template_kwargs: dict[str, Any],
    ending: PromptEnding = PromptEnding(),
    media: MediaIntake | None = None,
) -> PreparedChat:
    """With `media`, media parts the model takes become markers (recorded there) and
    the tokens are left to the projector."""
    if not template.jinja:  # as llama-server without --jinja
        if tools:
            raise ChatInputError("tools param requires --jinja flag")
        if tool_choice not in (None, "auto"):
            raise ChatInputError("tool_choice param requires --jinja flag")
    messages = normalise_messages(messages, media)
    markers = template.reasoning_markers
    continued = messages.pop() if ending.continue_final and messages else None
    messages = strip_prior_reasoning(messages, preserve=bool(template_kwargs.get("preserve_thinking", False)),
                                     open_marker=markers.open, close_marker=markers.close)
    plan = plan_tools(tools, tool_choice)
    if plan.instruction:
        messages = add_instruction(messages, plan.instruction)
    prompt = _render(template, messages, plan, template_kwargs, ending, continued)
    bos_text = tokenizer.special_piece(tokenizer.bos).decode("utf-8", "replace") if tokenizer.bos >= 0 else ""
    add_special = not (bos_text and prompt.startswith(bos_text))
    has_media = media is not None and bool(media.refs)
    tokens = [] if has_media else tokenizer.encode(prompt, add_special=add_special, parse_special=True)
    start_in_reasoning = prompt.rstrip().endswith(markers.open)
    return PreparedChat(
        prompt=prompt,
        tokens=tokens,
        plan=plan,
        parse_reasoning=template.supports_thinking or start_in_reasoning,
        start_in_reasoning=start_in_reasoning,
        markers=markers,
        add_special=add_special,
        media=media if has_media else None,
    )


def _render(template: ChatTemplate, messages: list[dict], plan: ToolPlan, template_kwargs: dict[str, Any],
            ending: PromptEnding, continued: dict | None) -> str:
    def render(add_generation_prompt: bool) -> str:
        return template.render(messages, tools=plan.tools or None, add_generation_prompt=add_generation_prompt,
                               **template_kwargs)

    if continued is None:
        return render(ending.add_generation_prompt)
    without = render(False)
    gen_prompt = generation_prompt(render(True), without)
    thinking = template.supports_thinking
    return without + continued_text(gen_prompt, continued, ending.continue_final, template.reasoning_markers, thinking)
