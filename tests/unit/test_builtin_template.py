"""--no-jinja's renderer: llama.cpp's built-in chat formats through
llama_chat_apply_template (no model needed)."""

from __future__ import annotations

import pytest

from mlxcel.chat.builtin_template import BuiltinTemplate, builtin_names
from mlxcel.chat.template import CHATML_TEMPLATE, TemplateError


def test_a_name_or_a_templates_text_picks_the_format():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    chatml = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert BuiltinTemplate("chatml").render(messages) == chatml
    assert BuiltinTemplate(CHATML_TEMPLATE).render(messages) == chatml  # matched by its markers
    without = BuiltinTemplate("chatml").render(messages, add_generation_prompt=False)
    assert without == chatml.rsplit("<|im_start|>", 1)[0]
    llama3 = BuiltinTemplate("llama3").render(messages)
    assert llama3.startswith("<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>")
    assert "llama3" in builtin_names() and "chatml" in builtin_names()


def test_text_parts_are_joined_and_variables_ignored():
    parts = [{"type": "text", "text": "one"}, {"type": "image_url", "image_url": {"url": "x"}},
             {"type": "text", "text": "two"}]
    rendered = BuiltinTemplate("chatml").render([{"role": "user", "content": parts}], enable_thinking=False)
    assert "one\ntwo<|im_end|>" in rendered


def test_an_answer_longer_than_the_first_buffer_is_whole():
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": "x"} for i in range(2000)]
    rendered = BuiltinTemplate("chatml").render(messages)
    assert rendered.count("<|im_start|>") == 2001 and rendered.endswith("<|im_start|>assistant\n")


def test_tools_and_unknown_templates_are_refused():
    with pytest.raises(TemplateError, match="requires --jinja"):
        BuiltinTemplate("chatml").render([{"role": "user", "content": "x"}], tools=[{"type": "function"}])
    with pytest.raises(TemplateError, match="no built-in chat template like this one.*chatml"):
        BuiltinTemplate("{{ messages[0].content }}")
    assert BuiltinTemplate("chatml").render([{"role": "user", "content": "\udc80 lone"}])  # replaced, not raised
