"""Chat templates: golden renders of real model templates, and the sandbox's guarantees."""

from __future__ import annotations

import ctypes
from pathlib import Path

import gguf
import llama_cpp
import pytest

from mlxcel.chat import template as template_module
from mlxcel.chat.template import CHATML_TEMPLATE, ChatTemplate, TemplateError, load_chat_template
from tests.fixtures.think_model import qwen3_template
from tests.unit.template_probes import ends_inside_think, opens_reasoning, supports_tools

CONVERSATION = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And 3+3?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
WEATHER_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Zürich"}},
}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'}

QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
QWEN_TOOLS_BLOCK = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", '
    '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n'
    "</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)
WEATHER_CALL_TEXT = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich"}}\n</tool_call>'
WEATHER_RESULT_TEXT = "<|im_start|>user\n<tool_response>\n{\"temp_c\": 21}\n</tool_response><|im_end|>\n"


def gguf_template(path: Path) -> str:
    return gguf.GGUFReader(path).get_field("tokenizer.chat_template").contents()


@pytest.fixture(scope="module")
def smollm2(smollm2_path: Path) -> ChatTemplate:
    return ChatTemplate(gguf_template(smollm2_path))


@pytest.fixture(scope="module")
def qwen_coder(qwen_coder_path: Path) -> ChatTemplate:
    return ChatTemplate(gguf_template(qwen_coder_path))


@pytest.fixture(scope="module")
def qwen3() -> ChatTemplate:
    return ChatTemplate(qwen3_template())


# -- SmolLM2 -------------------------------------------------------------------------


def test_smollm2_adds_its_default_system_prompt(smollm2: ChatTemplate) -> None:
    assert smollm2.render(CONVERSATION) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4.<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_smollm2_own_system_without_generation_prompt(smollm2: ChatTemplate) -> None:
    messages = [{"role": "system", "content": "Be brief."}, *CONVERSATION]
    assert smollm2.render(messages, add_generation_prompt=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4.<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
    )


# -- Qwen2.5-Coder -------------------------------------------------------------------


def test_qwen_coder_without_tools(qwen_coder: ChatTemplate) -> None:
    assert qwen_coder.render(CONVERSATION[:1]) == (
        f"<|im_start|>system\n{QWEN_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen_coder_empty_tools_render_as_none(qwen_coder: ChatTemplate) -> None:
    assert qwen_coder.render(CONVERSATION[:1], tools=[]) == qwen_coder.render(CONVERSATION[:1])


def test_qwen_coder_with_tools(qwen_coder: ChatTemplate) -> None:
    assert qwen_coder.render(CONVERSATION[:1], tools=TOOLS) == (
        f"<|im_start|>system\n{QWEN_SYSTEM}\n\n{QWEN_TOOLS_BLOCK}"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen_coder_tool_calls_and_results(qwen_coder: ChatTemplate) -> None:
    messages = [
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
        TOOL_RESULT,
    ]
    assert qwen_coder.render(messages, tools=TOOLS) == (
        f"<|im_start|>system\n{QWEN_SYSTEM}\n\n{QWEN_TOOLS_BLOCK}"
        "<|im_start|>user\nWeather in Zürich?<|im_end|>\n"
        f"<|im_start|>assistant\n{WEATHER_CALL_TEXT}<|im_end|>\n"
        f"{WEATHER_RESULT_TEXT}"
        "<|im_start|>assistant\n"
    )


# -- Qwen3 (thinking) ----------------------------------------------------------------


def test_qwen3_thinking_on_leaves_the_choice_to_the_model(qwen3: ChatTemplate) -> None:
    expected = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert qwen3.render(CONVERSATION[:1]) == expected
    assert qwen3.render(CONVERSATION[:1], enable_thinking=True) == expected


def test_qwen3_thinking_off_prefills_an_empty_think_block(qwen3: ChatTemplate) -> None:
    assert qwen3.render(CONVERSATION[:1], enable_thinking=False) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_qwen3_strips_reasoning_before_the_last_user_turn(qwen3: ChatTemplate) -> None:
    messages = [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4."},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "6.", "reasoning_content": "Add again."},
    ]
    assert qwen3.render(messages, add_generation_prompt=False) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4.<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
        "<|im_start|>assistant\n<think>\nAdd again.\n</think>\n\n6.<|im_end|>\n"
    )
    assert qwen3.render(messages[:3]) == (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4.<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_qwen3_keeps_reasoning_within_the_current_tool_loop(qwen3: ChatTemplate) -> None:
    messages = [
        {"role": "user", "content": "Weather in Zürich?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Need the weather tool.",
            "tool_calls": [WEATHER_CALL],
        },
        TOOL_RESULT,
    ]
    assert qwen3.render(messages, tools=TOOLS) == (
        f"<|im_start|>system\n{QWEN_TOOLS_BLOCK}"
        "<|im_start|>user\nWeather in Zürich?<|im_end|>\n"
        f"<|im_start|>assistant\n<think>\nNeed the weather tool.\n</think>\n\n{WEATHER_CALL_TEXT}<|im_end|>\n"
        f"{WEATHER_RESULT_TEXT}"
        "<|im_start|>assistant\n"
    )


# -- what a template supports --------------------------------------------------------


def _properties(template: ChatTemplate) -> tuple[bool, bool, bool]:
    return opens_reasoning(template), template.supports_thinking, supports_tools(template)


def test_properties_of_real_templates(smollm2: ChatTemplate, qwen_coder: ChatTemplate, qwen3: ChatTemplate) -> None:
    assert _properties(smollm2) == (False, False, False)
    assert _properties(qwen_coder) == (False, False, True)
    # Qwen3 lets the model open <think> itself; its prompt does not.
    assert _properties(qwen3) == (False, True, True)


def test_a_prompt_that_opens_think_is_detected() -> None:
    r1_like = ChatTemplate(
        "{% for m in messages %}<｜{{ m.role }}｜>{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}"
    )
    assert opens_reasoning(r1_like) and r1_like.supports_thinking
    assert not supports_tools(r1_like)
    assert ends_inside_think("x<think>") and ends_inside_think("x<think>\n")
    assert not ends_inside_think("x<think>\n\n</think>\n\n") and not ends_inside_think("x<think>\n\n")


def test_a_template_that_fails_on_probes_supports_nothing() -> None:
    broken = ChatTemplate("{{ raise_exception('no') }}")
    assert not opens_reasoning(broken) and not supports_tools(broken)


# -- the environment transformers renders with ---------------------------------------


def test_tools_is_undefined_unless_non_empty() -> None:
    probe = ChatTemplate("{{ 'defined' if tools is defined else 'undefined' }}")
    assert probe.render([]) == "undefined"
    assert probe.render([], tools=[]) == "undefined"
    assert probe.render([], tools=None) == "undefined"
    assert probe.render([], tools=TOOLS) == "defined"


def test_variables_special_tokens_and_kwargs() -> None:
    template = ChatTemplate(
        "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ messages | length }}|{{ custom }}",
        bos_token="<s>",
        eos_token="</s>",
    )
    assert template.render([{"role": "user", "content": "x"}], custom="yes") == "<s>|</s>|True|1|yes"
    assert template.render([], add_generation_prompt=False, messages=["ignored"], custom=1) == "<s>|</s>|False|0|1"


def test_trim_and_lstrip_blocks() -> None:
    template = ChatTemplate("{% for m in messages %}\n    {% if m %}\n{{ m }}\n    {% endif %}\n{% endfor %}")
    assert template.render(["a", "b"]) == "a\nb\n"


def test_tojson_keeps_non_ascii_and_takes_transformers_arguments() -> None:
    value = {"b": "Zürich ☀", "a": [1, 2]}
    assert ChatTemplate("{{ v | tojson }}").render([], v=value) == '{"b": "Zürich ☀", "a": [1, 2]}'
    assert ChatTemplate("{{ v | tojson(sort_keys=true) }}").render([], v=value) == '{"a": [1, 2], "b": "Zürich ☀"}'
    compact = ChatTemplate("{{ v | tojson(separators=(',', ':')) }}").render([], v=value)
    assert compact == '{"b":"Zürich ☀","a":[1,2]}'
    indented = ChatTemplate("{{ v | tojson(indent=2) }}").render([], v={"a": 1})
    assert indented == '{\n  "a": 1\n}'
    assert ChatTemplate("{{ '<b>' | tojson }}").render([]) == '"<b>"'


def test_loop_controls() -> None:
    template = ChatTemplate(
        "{% for i in range(10) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}"
        "{{ i }}{% endfor %}"
    )
    assert template.render([]) == "023"


def test_strftime_now() -> None:
    rendered = ChatTemplate("{{ strftime_now('%Y') }}").render([])
    assert rendered.isdigit() and len(rendered) == 4


# -- failures are TemplateErrors -----------------------------------------------------


def test_raise_exception_carries_its_message() -> None:
    template = ChatTemplate(
        "{% if messages[0].role != 'user' %}{{ raise_exception('Conversation must start with user') }}{% endif %}ok"
    )
    assert template.render([{"role": "user", "content": "x"}]) == "ok"
    with pytest.raises(TemplateError) as info:
        template.render([{"role": "system", "content": "x"}])
    assert str(info.value) == "Conversation must start with user"


def test_syntax_error_names_the_line() -> None:
    with pytest.raises(TemplateError, match=r"syntax error at line 2"):
        ChatTemplate("ok\n{% for m in messages %}{{ m }}")


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ raise_exception.__globals__ }}",
        "{{ messages.append(1) }}",
        "{% set d = {} %}{{ d.update({'a': 1}) }}",
        "{{ '{0.__class__}'.format(1) }}",
    ],
)
def test_sandbox_escapes_and_mutations_are_refused(source: str) -> None:
    with pytest.raises(TemplateError, match="^chat template error: access to attribute .* is unsafe$"):
        ChatTemplate(source).render([])


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("{{ messages[0].content }}", "chat template error"),
        ("{{ nothing.here }}", "'nothing' is undefined"),
        ("{{ 1 + 'a' }}", "TypeError"),
        ("{{ messages[0].content + 1 }}", "chat template error"),
    ],
)
def test_runtime_errors_become_template_errors(source: str, match: str) -> None:
    with pytest.raises(TemplateError, match=match):
        ChatTemplate(source).render([])


@pytest.mark.parametrize(
    "source",
    [
        "{{ 'x' * 10 ** 10 }}",
        "{{ 10 ** (10 ** 8) }}",
        "{{ 2 ** 100000000 }}",
        "{% set ns = namespace(s='x' * 1000000) %}{% for i in range(30) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
        "{% for i in range(100000) %}{{ 'y' * 100 }}{% endfor %}",
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "{% for i in range(10 ** 9) %}{% endfor %}",
    ],
)
def test_pathological_templates_are_stopped(source: str) -> None:
    with pytest.raises(TemplateError, match="chat template error"):
        ChatTemplate(source).render([])


# a list of two strings holding as many characters as the output cap allows: more, once
# printed (quotes, separators)
ALIASES = "{% set s = 'x' * 2 ** 22 %}{% set l = [s, s] %}"


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("{% set ns = namespace(s='x' * 1000000) %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
         "concatenation"),
        ("{{ 'x'.ljust(2 ** 31) }}", "ljust"),
        ("{{ 'x'.zfill(2 ** 31) }}", "zfill"),
        ("{{ ('\t' * 1000).expandtabs(2 ** 20) }}", "expandtabs"),
        ("{{ ('x' * 8000000).replace('', 'y' * 8000000) }}", "replace"),
        ("{{ ('x' * 8000000)|replace('', 'y' * 8000000) }}", "replace"),
        ("{{ 'x'|center(2 ** 31) }}", "center"),
        ("{{ ('\n' * 1000)|indent(2 ** 23, blank=True) }}", "indent"),
        ("{{ '%999999999s' % 'x' }}", "format"),
        ("{{ '%*s' % (999999999, 'x') }}", "format"),
        ("{{ '{:>999999999}'.format('x') }}", "format"),
        ("{{ '{:{}}'.format('x', 999999999) }}", "format"),
        ("{{ '%999999999s'|format('x') }}", "format"),
        (ALIASES + "{{ l|join }}", "join"),
        (ALIASES + "{{ ''.join(l) }}", "join"),
        (ALIASES + "{{ l|map('string')|join }}", "join"),
        (ALIASES + "{{ ''.join(l|select) }}", "join"),
        ("{{ ([0] * 2 ** 23)|batch(2 ** 22)|sum(start=[0]) }}", "sum"),
        (ALIASES + "{{ l|pprint }}", "pprint"),
        (ALIASES + "{{ l }}", "printed value"),
        (ALIASES + "{{ l|string }}", "string"),
        (ALIASES + "{{ l|tojson }}", "tojson"),
        ("{{ messages|tojson(indent=2 ** 30) }}", "tojson"),
        ("{{ lipsum(10 ** 6) }}", "lipsum"),
        ("{{ ([1]|batch(2 ** 31, 0)|list)[0]|length }}", "batch"),
        ("{{ (['x' * 8000000] * 1000)|map('upper')|list|length }}", "repetition"),
        ("{{ ([[0] * 100000] * 100000)|map('list')|list|length }}", "repetition"),
        ("{% set s = 'x' * 5000000 %}{{ ([s] + [s])|map('upper')|list|length }}", "concatenation"),
        ("{% set s = 'x' * 5000000 %}{% set a = [s, s] %}{% set b = [a, a] %}{{ b|upper }}", "literal"),
        ("{% set s = 'x' * 5000000 %}{{ (s, s)|map('upper')|list|length }}", "literal"),
        ("{% set s = 'x' * 5000000 %}{{ {'a': s, 'b': s}|map('upper')|list|length }}", "literal"),
        ("{% set s = 'x' * 5000000 %}{{ dict(a=s, b=s)|string|length }}", "dict"),
        ("{{ range(100000)|map('center', 8000000)|list|length }}", "map"),
        ("{% set s = 'x' * 2 ** 22 %}{% macro twice() %}{{ s }}{{ s }}{% endmacro %}{{ twice()|length }}",
         "concatenation"),
        ("{% set s = 'x' * 2 ** 22 %}{% for i in range(2) recursive %}{{ s }}{% if loop.depth < 3 %}"
         "{{ loop(range(2))|length }}{% endif %}{% endfor %}", "concatenation"),
        ("{% set s = 'x' * 5000000 %}{% set n = namespace(a=s) %}{{ namespace(a=n, b=n)|upper|length }}", "namespace"),
        ("{{ range(1)|slice(10 ** 9)|list|length }}", "slice"),
    ],
)
def test_blow_ups_are_refused_before_they_allocate(source: str, what: str) -> None:
    """Each of these built gigabytes (or more) before the output cap could see them."""
    with pytest.raises(TemplateError, match=f"^chat template error: {what} .*too large$"):
        ChatTemplate(source).render([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize(
    "source",
    [
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% for i in range(100000)|list %}{% for c in 'x' * 100000 %}{% endfor %}{% endfor %}",
        "{% macro f(n) %}{% if n < 8 %}{% for i in range(100) %}{{ f(n + 1) }}{% endfor %}{% endif %}{% endmacro %}"
        "{{ f(0) }}",
    ],
)
def test_a_render_that_would_not_end_is_stopped(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(template_module, "RENDER_SECONDS", 0.5)
    with pytest.raises(TemplateError, match=r"^chat template error: rendering took longer than 0.5 s$"):
        ChatTemplate(source).render([])
    assert ChatTemplate("{% for i in range(3) %}{{ i }}{% endfor %}").render([]) == "012"  # the deadline was reset


def test_guarded_operations_still_render_ordinary_sizes() -> None:
    source = ("{{ 'a%sb' % 'c' }}|{{ '{}-{}'.format(1, 2) }}|{{ 'x'|center(3) }}|{{ 'a\nb'|indent(2) }}|"
              "{{ [1, 2]|join(',') }}|{{ 'ab'|replace('a', 'c') }}|{{ [1, 'a'] }}|{{ 'x' ~ 1 ~ [2] }}|"
              "{{ 'x'.rjust(3, '-') }}|{{ {'a': 1}|tojson(indent=1) }}|{{ lipsum(1, false, 2, 3) != '' }}|"
              "{{ [[1], [2]]|sum(start=[]) }}|{{ [1, 2]|map('string')|join('+') }}|{{ '-'.join(['a', 'b']|select) }}|"
              "{{ [1]|batch(3, 0)|list }}|{{ range(5)|slice(2)|list }}|{{ ([0] * 8000000)|length }}|{{ [[]] * 2 }}|"
              "{% for a, b in [(1, 2)] %}{{ a + b }}{% endfor %}{% set c, d = (3, {'k': [4]}) %}{{ c }}{{ d.k }}|"
              "{{ namespace(v=dict(w=5)).v.w }}|{{ [{'a': 'p'}, {'a': 'q'}]|map(attribute='a')|join }}|"
              "{% block b %}xyz{% endblock %}{{ self.b() }}|{% macro m() %}ab{{ caller() }}{% endmacro %}"
              "{% call m() %}cd{% endcall %}|{% set blk %}s{{ 1 }}{% endset %}{{ blk }}|"
              "{% autoescape true %}{% macro h() %}<b>{{ '<' }}</b>{% endmacro %}{{ h() }}{% endautoescape %}")
    assert ChatTemplate(source).render([]) == ("acb|1-2| x |a\n  b|1,2|cb|[1, 'a']|x1[2]|--x|{\n \"a\": 1\n}|True|"
                                         "[1, 2]|1+2|a-b|[[1, 0, 0]]|[[0, 1, 2], [3, 4]]|8000000|[[], []]|3"
                                         "3[4]|5|pq|xyzxyz|abcd|s1|<b>&lt;</b>")


# -- which template a model gets -----------------------------------------------------


def test_a_model_without_template_gets_chatml() -> None:
    for missing in (None, "", "  \n"):
        assert load_chat_template(missing, None).source == CHATML_TEMPLATE


def test_chatml_matches_llama_cpp_builtin() -> None:
    messages = [{"role": "system", "content": "Be brief."}, *CONVERSATION]
    chat = (llama_cpp.llama_chat_message * len(messages))(
        *(llama_cpp.llama_chat_message(role=m["role"].encode(), content=m["content"].encode()) for m in messages)
    )
    buf = ctypes.create_string_buffer(4096)
    n = llama_cpp.llama_chat_apply_template(b"chatml", chat, len(messages), True, buf, len(buf))
    assert load_chat_template(None, None).render(messages) == buf.raw[:n].decode()


def test_chatml_renders_tool_call_turns_without_content() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]}]
    assert load_chat_template(None, None).render(messages, add_generation_prompt=False) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n"
    )


def test_override_file_wins_over_the_model_template(tmp_path: Path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text("{{ bos_token }}{{ messages[0].content }}", encoding="utf-8")
    template = load_chat_template("model template", str(path), bos_token="<s>")
    assert template.render([{"role": "user", "content": "hi"}]) == "<s>hi"
    assert load_chat_template("model template", None).render([]) == "model template"


def test_bad_override_files_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match=r"cannot read chat template file .*missing\.jinja"):
        load_chat_template(None, str(tmp_path / "missing.jinja"))
    with pytest.raises(TemplateError, match="cannot read chat template file"):
        load_chat_template(None, str(tmp_path))
    binary = tmp_path / "binary.jinja"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(TemplateError, match="cannot read chat template file"):
        load_chat_template(None, str(binary))
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% if %}", encoding="utf-8")
    with pytest.raises(TemplateError, match=r"broken\.jinja: chat template syntax error at line 1"):
        load_chat_template(None, str(broken))
