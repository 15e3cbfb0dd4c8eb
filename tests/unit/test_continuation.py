"""How a chat prompt ends: llama-server's rules for assistant prefill,
add_generation_prompt and continue_final_message, and the continued prompt's text."""

from __future__ import annotations

import pytest

from mlxcel.chat.continuation import CONTENT, REASONING, PromptEnding, resolve_ending
from mlxcel.chat.errors import ChatInputError
from mlxcel.chat.prompt import _render
from mlxcel.chat.template import CHATML_TEMPLATE, ChatTemplate
from mlxcel.chat.tool_choice import plan_tools
from tests.fixtures.think_model import qwen3_template

USER = {"role": "user", "content": "Hi"}
PREFILL = {"role": "assistant", "content": '{"name": "'}


def test_a_final_assistant_message_is_continued_by_default():
    assert resolve_ending([USER, PREFILL], None, None, True) == PromptEnding(False, CONTENT)
    assert resolve_ending([USER, PREFILL], None, None, False) == PromptEnding(True, None)  # --no-prefill-assistant
    assert resolve_ending([USER], None, None, True) == PromptEnding(True, None)
    assert resolve_ending([USER], False, None, True) == PromptEnding(False, None)


def test_continue_final_message_as_vllm_and_llama_server_spell_it():
    assert resolve_ending([USER, PREFILL], False, True, True) == PromptEnding(False, CONTENT)
    assert resolve_ending([USER, PREFILL], False, "reasoning_content", True) == PromptEnding(False, REASONING)
    thought = {"role": "assistant", "content": "", "reasoning_content": "Let me"}
    assert resolve_ending([USER, thought], False, True, True).continue_final == REASONING
    # anything but true / "content" / "reasoning_content" is no continuation (llama-server's parse)
    assert resolve_ending([USER], None, "yes", True) == PromptEnding(True, None)


@pytest.mark.parametrize("messages, agp, cfm, message", [
    ([USER, PREFILL], None, True, "Cannot set both add_generation_prompt and continue_final_message to true."),
    ([USER, PREFILL], True, True, "Cannot set both add_generation_prompt and continue_final_message to true."),
    ([USER, PREFILL, PREFILL], None, None, "Cannot have 2 or more assistant messages at the end of the list."),
    ([USER, {"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}], None, None,
     "Cannot continue an assistant message that contains tool calls."),
])
def test_contradictions_are_llama_servers_400s(messages, agp, cfm, message):
    with pytest.raises(ChatInputError) as caught:
        resolve_ending(messages, agp, cfm, True)
    assert caught.value.message == message


def test_the_continued_prompt_is_the_earlier_turns_the_generation_prompt_and_the_text():
    template = ChatTemplate(CHATML_TEMPLATE)
    prompt = _render(template, [USER], plan_tools(None, None), {}, PromptEnding(False, CONTENT), PREFILL)
    assert prompt == '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n{"name": "'


def test_on_a_thinking_template_the_reasoning_block_is_closed_before_the_content():
    template = ChatTemplate(qwen3_template())
    message = {"role": "assistant", "content": "Sure", "reasoning_content": "ok"}
    prompt = _render(template, [USER], plan_tools(None, None), {}, PromptEnding(False, CONTENT), message)
    assert prompt.endswith("<|im_start|>assistant\n<think>ok</think>Sure")
    prompt = _render(template, [USER], plan_tools(None, None), {}, PromptEnding(False, REASONING), message)
    assert prompt.endswith("<|im_start|>assistant\n<think>ok")
