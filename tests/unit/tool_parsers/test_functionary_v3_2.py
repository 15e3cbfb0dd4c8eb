"""Functionary v3.2: >>>recipient lines; the prompt supplies the first >>>."""

from __future__ import annotations

import json

from mlxcel.chat.tool_parsers.functionary_v3_2 import FunctionaryV32Parser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TYPED_TOOLS as TOOLS
from tests.unit.tool_parsers.tools import args

P = FunctionaryV32Parser


def test_content_then_one_call():
    text = 'all\nLet me look up the weather for you.\n>>>get_weather\n{"city": "Paris", "days": 3}'
    out = check_stream(P, text, TOOLS)
    assert out.content == "Let me look up the weather for you."
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.tool_calls[0].arguments == '{"city": "Paris", "days": 3}'  # the model's own text


def test_first_call_without_prompt_marker_then_a_second():
    text = 'get_weather\n{"city": "Oslo"}>>>search_web\n{"query": "Oslo  jazz", "limit": 2.0}'
    out = check_stream(P, text, TOOLS)
    assert out.content == ""
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert out.tool_calls[1].arguments == '{"query": "Oslo  jazz", "limit": 2.0}'


def test_plain_reply_without_any_recipient():
    text = "Hello! How can I help you today?"
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_all_only_reply():
    out = check_stream(P, "all\nThe capital of France is Paris.", TOOLS)
    assert out.content == "The capital of France is Paris." and out.tool_calls == []


def test_false_alarms_are_content():
    text = "all\nIn a REPL you type >>> print(1) and see 1.\nA word\nthen more >> text."
    out = check_stream(P, text, TOOLS)
    assert out.content == "In a REPL you type >>> print(1) and see 1.\nA word\nthen more >> text."
    # a first line that names no declared tool is content, even followed by JSON
    text = 'Example\n{"a": 1}'
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_nested_unicode_arguments_keep_model_text():
    arguments = '{"city": "東京", "filters": {"min_temp": -5, "label": "寒い"}, "tags": ["雪", "風"]}'
    text = f"all\n確認します。>>>get_weather\n{arguments}\n>>>all\n少々お待ちください。"
    out = check_stream(P, text, TOOLS)
    assert out.content == "確認します。少々お待ちください。"
    assert out.tool_calls[0].arguments == arguments
    assert args(out.tool_calls[0])["filters"] == {"min_temp": -5, "label": "寒い"}


def test_json_with_marker_like_strings():
    arguments = '{"query": "a >>>b\\n{\\"x\\": }", "limit": 1}'
    out = check_stream(P, f"search_web\n{arguments}", TOOLS)
    assert json.loads(out.tool_calls[0].arguments) == {"query": 'a >>>b\n{"x": }', "limit": 1}


def test_python_raw_code():
    code = "import math\nprint(math.pi)\n"
    out = check_stream(P, f"all\nComputing.>>>python\n{code}", TOOLS)
    assert out.content == "Computing."
    assert out.tool_calls[0].name == "python"
    assert args(out.tool_calls[0]) == {"code": code}


def test_unfinished_call_is_dropped():
    out = check_stream(P, 'all\nOne moment.>>>get_weather\n{"city": "Par', TOOLS)
    assert out.content == "One moment."
    assert out.tool_calls == []


def test_non_json_body_is_swallowed_up_to_the_next_recipient():
    out = check_stream(P, "get_weather\n{city: Paris}>>>all\nSorry.", TOOLS)
    assert out.content == "Sorry."
    assert out.tool_calls == []


def test_matches_template():
    template = (
        "{%- else -%}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
        "{%- if message['content'] -%}{{ '>>>all\\n' + message['content'] }}{%- endif -%}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n>>>' }}{% endif %}"
    )
    assert P.matches_template(template)
    v31 = "{{ '<function=' + tool_call.function.name + '>' + tool_call.function.arguments + '</function>' }}"
    assert not P.matches_template(v31)
