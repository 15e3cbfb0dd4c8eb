from mlxcel.chat.tool_parsers.llama3 import Llama3Parser
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TOOLS, args, feed_pieces, tool

P = Llama3Parser


def test_bare_json_reply_is_a_call():
    text = '{"name": "get_weather", "parameters": {"city": "San Francisco, CA", "days": 1}}'
    out = check_stream(P, text, TOOLS)
    assert out.content == "" and out.tool_calls[0].name == "get_weather"
    assert out.tool_calls[0].arguments == '{"city": "San Francisco, CA", "days": 1}'


def test_type_member_first_and_arguments_key():
    text = '\n{"type": "function", "name": "search_web", "arguments": {"query": "llama {3.2}"}}'
    out = check_stream(P, text, TOOLS)
    assert out.content == "" and args(out.tool_calls[0]) == {"query": "llama {3.2}"}


def test_python_tag_with_two_calls():
    text = (
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Kraków"}}; '
        '{"name": "search_web", "parameters": {"query": "pierogi", "limit": 3}}'
    )
    out = check_stream(P, text, TOOLS)
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert out.tool_calls[0].arguments == '{"city": "Kraków"}'


def test_prose_then_python_tag():
    text = 'Let me search.\n<|python_tag|>{"name": "search_web", "parameters": {"query": "x;y<z"}}'
    out = check_stream(P, text, TOOLS)
    assert out.content == "Let me search.\n" and args(out.tool_calls[0]) == {"query": "x;y<z"}


def test_streams_arguments():
    deltas = feed_pieces(P, ['{"name": "get_weather", ', '"parameters": {"city": "Ro', 'me"}}'])
    assert not deltas[0].tool_calls and not deltas[0].content
    assert deltas[1].tool_calls[0].name == "get_weather" and deltas[1].tool_calls[1].arguments == '{"city": "Ro'
    assert deltas[2].tool_calls[0].arguments == 'me"}'


def test_plain_answers_stay_content():
    text = "The capital of France is Paris. Use {braces} and <|python or <| freely."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls
    # a JSON answer that is no call, an undeclared name, or no tools at all
    for text, tools in [
        ('{"answer": 42, "unit": "km"}', TOOLS),
        ('{"name": "Ada Lovelace", "parameters": {"born": 1815}}', TOOLS),
        ('{"name": "get_weather", "parameters": {"city": "Paris"}}', None),
    ]:
        out = check_stream(P, text, tools)
        assert out.content == text and not out.tool_calls


def test_unfinished():
    out = check_stream(P, '{"name": "get_weather", "parameters": {"city": "Pa', TOOLS)
    assert out.tool_calls[0].arguments == '{"city": "Pa'
    out = check_stream(P, '<|python_tag|>{"name": "get_w', TOOLS)
    assert out.content == '<|python_tag|>{"name": "get_w' and not out.tool_calls


def test_builtin_and_code_calls():
    out = check_stream(P, '<|python_tag|>brave_search.call(query="weather in Paris")', TOOLS)
    assert out.tool_calls[0].name == "brave_search" and args(out.tool_calls[0]) == {"query": "weather in Paris"}
    code = "import math\nprint(math.sqrt(2))"
    out = check_stream(P, "<|python_tag|>" + code, TOOLS + [tool("python", {"code": {"type": "string"}})])
    assert out.tool_calls[0].name == "python" and args(out.tool_calls[0]) == {"code": code}
    out = check_stream(P, "<|python_tag|>" + code, TOOLS)
    assert out.content == "<|python_tag|>" + code and not out.tool_calls


def test_matches_template_and_grammar():
    llama31 = (
        '{{- \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}'
        "{{- '<|python_tag|>' + tool_call.name + '.call(' }}"
    )
    assert P.matches_template(llama31)
    functionary = "{{- '<|python_tag|>' }} <function=example>{\"a\": 1}</function>"
    assert not P.matches_template(functionary)
    grammar = P(TOOLS).call_grammar(TOOLS[:1])
    assert grammar["prefix"] == "<|python_tag|>" and grammar["suffix"] == ""
    assert grammar["schema"]["required"] == ["name", "parameters"]
