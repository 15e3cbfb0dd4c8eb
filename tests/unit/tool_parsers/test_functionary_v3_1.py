from mlxcel.chat.tool_parsers.functionary_v3_1 import FunctionaryV31Parser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TOOLS, args

P = FunctionaryV31Parser


def test_prose_then_one_call():
    text = 'Let me check.\n<function=get_weather>{"city": "Paris", "days": 2}</function>'
    out = check_stream(P, text, TOOLS)
    assert out.content == "Let me check.\n"
    assert out.tool_calls[0].name == "get_weather" and out.tool_calls[0].arguments == '{"city": "Paris", "days": 2}'


def test_two_calls_unicode_and_braces():
    text = '<function=get_weather>{"city": "São Paulo"}</function><function=search_web>{"query": "</function> {x}"}</function>'
    out = check_stream(P, text, TOOLS)
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert args(out.tool_calls[0]) == {"city": "São Paulo"}


def test_python_tag_is_code_for_python():
    out = check_stream(P, "<|python_tag|>import math\nprint(math.pi)", TOOLS)
    assert out.tool_calls[0].name == "python" and args(out.tool_calls[0]) == {"code": "import math\nprint(math.pi)"}


def test_no_call_false_alarm_and_malformed():
    text = "HTML like <func> or <function is fine."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls
    text = "Hmm <function=get_weather>Paris please</function>"
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls


def test_unclosed_call_at_end():
    out = check_stream(P, '<function=get_weather>{"city": "Lima"}', TOOLS)
    assert args(out.tool_calls[0]) == {"city": "Lima"}
    out = check_stream(P, '<function=get_weather>{"city": "Li', TOOLS)
    assert out.content == '<function=get_weather>{"city": "Li' and not out.tool_calls


def test_matches_template():
    v31 = (
        "{{- 'Use the function \\'example_function_name\\' to answer: "
        "<function=example_function_name>{\"example_name\": \"example_value\"}</function>' }}"
        "{%- if message.role == 'ipython' %}<|python_tag|>"
    )
    assert P.matches_template(v31)
    assert not P.matches_template("<tool_call>\n<function=x>\n<parameter=a>\n1\n</parameter>")
