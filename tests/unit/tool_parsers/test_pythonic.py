from mlxcel.chat.tool_parsers.pythonic import PythonicParser, python_calls
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TOOLS, args

P = PythonicParser


def test_bare_list_of_calls():
    text = '[get_weather(city="Paris", days=2), search_web(query="musée d\'Orsay", limit=None)]'
    out = check_stream(P, text, TOOLS)
    assert out.content == ""
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert out.tool_calls[0].arguments == '{"city": "Paris", "days": 2}'
    assert args(out.tool_calls[1]) == {"query": "musée d'Orsay", "limit": None}


def test_tagged_calls_after_prose():
    text = (
        "Checking both.<|tool_call_start|>[get_weather(city='Oslo'), "
        'search_web(query="a{b}c", filters={"lang": ["en", "nb"], "safe": True, "min": -1.5})]<|tool_call_end|>'
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == "Checking both."
    assert args(out.tool_calls[1]) == {"query": "a{b}c", "filters": {"lang": ["en", "nb"], "safe": True, "min": -1.5}}


def test_no_call_and_false_alarm():
    text = "Lists like [1, 2] and tags like <|tool_call are just text."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls


def test_bare_list_needs_declared_tools_and_literals():
    for text in ['[send_email(to="x")]', "[get_weather(__import__('os').system('ls'))]", "[get_weather('Paris')]", "[1, 2]"]:
        out = check_stream(P, text, TOOLS)
        assert out.content == text and not out.tool_calls
    assert not check_stream(P, '[get_weather(city="Paris")]', None).tool_calls


def test_only_literals_are_read():
    assert python_calls("[f(x=open('/etc/passwd').read())]") is None
    assert python_calls("[f(x=1 + 2)]") is None
    assert python_calls("[f(x=y)]") is None
    assert python_calls("[f(**kw)]") is None
    assert python_calls("[f(flag=true, v=null)]") == [("f", '{"flag": true, "v": null}')]


def test_unfinished_or_broken_block_is_released():
    text = "Sure <|tool_call_start|>[get_weather(city="
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls


def test_matches_template():
    assert P.matches_template("{{- '<|tool_call_start|>' + tool_calls + '<|tool_call_end|>' }}")
    assert P.matches_template("[func_name1(params_name1=params_value1, params_name2=params_value2...)]")
    assert not P.matches_template("<tool_call>")
