from __future__ import annotations

import time

from mlxcel.chat import template as template_module
from mlxcel.chat.template import CHATML_TEMPLATE, ChatTemplate
from mlxcel.chat.template_caps import CAP_NAMES, probe_caps

TOOLS_TEMPLATE = """{%- if tools %}{% for t in tools %}{{ t.function.name }}{% endfor %}{% endif -%}
{%- for m in messages -%}
{%- if m.content is string %}{{ m.role }}: {{ m.content }}{% endif -%}
{%- for c in m.tool_calls or [] %}<call>{{ c.function.name }} {{ c.function.arguments | tojson }}</call>{% endfor -%}
{%- endfor -%}"""


def test_chatml_has_string_content_and_a_system_role_but_no_tools():
    caps = probe_caps(ChatTemplate(CHATML_TEMPLATE))
    assert caps["supports_string_content"] and caps["supports_system_role"]
    assert not caps["supports_tools"] and not caps["supports_tool_calls"]
    assert tuple(caps) == CAP_NAMES  # the names a timed-out template reports all false


def test_a_tool_template_renders_tools_and_parallel_calls():
    caps = probe_caps(ChatTemplate(TOOLS_TEMPLATE))
    assert caps["supports_tools"] and caps["supports_tool_calls"] and caps["supports_parallel_tool_calls"]
    assert not caps["supports_typed_content"] and not caps["supports_object_arguments"]


def test_a_template_out_of_time_on_one_probe_is_not_probed_again(monkeypatch):
    """Each probe would run the whole render deadline: one is enough to know."""
    monkeypatch.setattr(template_module, "RENDER_SECONDS", 0.3)
    endless = ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
    started = time.monotonic()
    caps = probe_caps(endless)
    assert time.monotonic() - started < 1.0
    assert tuple(caps) == CAP_NAMES and not any(caps.values())
