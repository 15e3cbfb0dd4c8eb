from __future__ import annotations

from mlxcel.chat.template import CHATML_TEMPLATE, ChatTemplate
from mlxcel.chat.template_caps import probe_caps

TOOLS_TEMPLATE = """{%- if tools %}{% for t in tools %}{{ t.function.name }}{% endfor %}{% endif -%}
{%- for m in messages -%}
{%- if m.content is string %}{{ m.role }}: {{ m.content }}{% endif -%}
{%- for c in m.tool_calls or [] %}<call>{{ c.function.name }} {{ c.function.arguments | tojson }}</call>{% endfor -%}
{%- endfor -%}"""


def test_chatml_has_string_content_and_a_system_role_but_no_tools():
    caps = probe_caps(ChatTemplate(CHATML_TEMPLATE))
    assert caps["supports_string_content"] and caps["supports_system_role"]
    assert not caps["supports_tools"] and not caps["supports_tool_calls"]
    assert set(caps) == {"supports_string_content", "supports_typed_content", "supports_tools",
                         "supports_tool_calls", "supports_parallel_tool_calls", "supports_system_role",
                         "supports_preserve_reasoning", "supports_reasoning_effort", "supports_object_arguments"}


def test_a_tool_template_renders_tools_and_parallel_calls():
    caps = probe_caps(ChatTemplate(TOOLS_TEMPLATE))
    assert caps["supports_tools"] and caps["supports_tool_calls"] and caps["supports_parallel_tool_calls"]
    assert not caps["supports_typed_content"] and not caps["supports_object_arguments"]
