from mlxcel.chat.tool_parsers.hermes import HermesParser
from mlxcel.chat.tool_parsers.json_calls import JsonCallReader
from tests.unit.tool_parser_harness import check_stream
from tests.unit.tool_parsers.tools import TOOLS, args, feed_pieces

P = HermesParser


def test_prose_then_one_call():
    text = (
        "I'll look up the weather for you.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == "I'll look up the weather for you.\n"
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.tool_calls[0].arguments == '{"city": "Paris", "days": 3}'
    assert out.tool_calls[0].id.startswith("call_")


def test_two_calls_keep_the_models_json_text():
    text = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"days":2,  "city":"Paris", "ratio": 1.50e1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search_web", "arguments": {"query": "louvre hours", "limit": 5}}\n</tool_call>'
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == ""
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert out.tool_calls[0].arguments == '{"days":2,  "city":"Paris", "ratio": 1.50e1}'
    assert args(out.tool_calls[1]) == {"query": "louvre hours", "limit": 5}


def test_no_call_plain_answer_with_brackets_and_braces():
    text = "Use `a < b` and a dict like {x: 1} or </tool> in code.\n```python\nd = {'k': 'v'}\n```"
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_unicode_and_nested_braces_inside_strings():
    arguments = '{"query": "天気 {東京} \\"quoted\\" }}", "filters": {"lang": ["ja", "en"], "nested": {"a": {}}}}'
    text = f'調べます。<tool_call>\n{{"name": "search_web", "arguments": {arguments}}}\n</tool_call>'
    out = check_stream(P, text, TOOLS)
    assert out.content == "調べます。"
    assert out.tool_calls[0].arguments == arguments


def test_false_alarm_partial_marker_is_released():
    text = "The <tool is ready and <tool_call is not a tag; <tool_calls> neither."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls
    out = check_stream(P, "Ends with a partial <tool_ca", TOOLS)
    assert out.content == "Ends with a partial <tool_ca"


def test_arguments_stream_before_the_call_closes():
    pieces = ['<tool_call>\n{"name": "get_weather", "argu', 'ments": {"ci', 'ty": "Par', 'is"}}\n</tool_call>']
    deltas = feed_pieces(P, pieces)
    assert deltas[0].tool_calls == []
    assert deltas[1].tool_calls[0].name == "get_weather" and deltas[1].tool_calls[-1].arguments == '{"ci'
    assert deltas[2].tool_calls[0].arguments == 'ty": "Par'
    assert deltas[3].tool_calls[0].arguments == 'is"}'


def test_other_object_shapes_are_read_whole():
    text = '<tool_call>\n{"arguments": {"city": "Oslo"}, "name": "get_weather"}\n</tool_call>'
    out = check_stream(P, text, TOOLS)
    assert out.tool_calls[0].name == "get_weather" and out.tool_calls[0].arguments == '{"city": "Oslo"}'
    text = '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}</tool_call>'
    out = check_stream(P, text, TOOLS)
    assert out.tool_calls[0].arguments == '{"city": "Oslo"}'
    text = '<tool_call>{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Rome"}}}</tool_call>'
    assert check_stream(P, text, TOOLS).tool_calls[0].arguments == '{"city": "Rome"}'


def test_missing_outer_brace_before_closing_tag():
    text = 'Ok.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>\nDone.'
    out = check_stream(P, text, TOOLS)
    assert out.tool_calls[0].arguments == '{"city": "Paris"}'
    assert out.content == "Ok.Done."


def test_malformed_block_is_released_verbatim():
    text = "Here:<tool_call>\nI want to call get_weather for Paris\n</tool_call> sorry."
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls
    text = '<tool_call>{"tool": "get_weather"}</tool_call>'
    assert check_stream(P, text, TOOLS).content == text


def test_unfinished_call_at_end_of_generation():
    # the head was read: the call stands, with the arguments as far as they went
    out = check_stream(P, 'Checking.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa', TOOLS)
    assert out.content == "Checking." and out.tool_calls[0].arguments == '{"city": "Pa'
    # never became a call: released as written
    out = check_stream(P, 'Checking.<tool_call>\n{"name": "get_wea', TOOLS)
    assert out.content == 'Checking.<tool_call>\n{"name": "get_wea' and not out.tool_calls


def test_fenced_json_to_a_declared_tool_is_a_call():
    text = 'Sure! Let me check.\n```json\n{"name": "get_weather", "arguments": {"city": "Berlin"}}\n```\n'
    out = check_stream(P, text, TOOLS)
    assert out.content == "Sure! Let me check.\n"
    assert out.tool_calls[0].name == "get_weather" and out.tool_calls[0].arguments == '{"city": "Berlin"}'


def test_bare_json_to_a_declared_tool_is_a_call():
    out = check_stream(P, '{"name": "search_web", "arguments": {"query": "qwen"}}', TOOLS)
    assert out.content == "" and out.tool_calls[0].name == "search_web"


def test_untagged_json_is_content_when_undeclared_or_without_tools():
    text = 'Example:\n```json\n{"name": "send_email", "arguments": {"to": "a@b.c"}}\n```'
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls
    text = '```json\n{"name": "get_weather", "arguments": {"city": "Berlin"}}\n```'
    for tools in (None, []):
        out = check_stream(P, text, tools)
        assert out.content == text and not out.tool_calls


def test_other_fences_and_json_data_stay_content():
    text = 'Data:\n```json\n{"city": "Paris", "temp": 21}\n```\n```python\nprint({"name": 1})\n```'
    out = check_stream(P, text, TOOLS)
    assert out.content == text and not out.tool_calls


def test_xml_body_inside_tool_call_is_read_too():
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nLyon\n</parameter>\n</function>\n</tool_call>"
    out = check_stream(P, text, TOOLS)
    assert out.tool_calls[0].arguments == '{"city": "Lyon"}'


def test_matches_template():
    qwen25 = (
        "{%- if tools %}{{- '<tools>' }}{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}"
        '{{- "</tools>\\n\\nFor each function call, return a json object with function name and arguments '
        'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, '
        '\\"arguments\\": <args-json-object>}\\n</tool_call>" }}'
    )
    assert P.matches_template(qwen25)
    coder = "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>"
    assert not P.matches_template(coder)
    assert not P.matches_template("{{ '[TOOL_CALLS]' }}")


def test_call_grammar():
    grammar = P(TOOLS).call_grammar(TOOLS)
    assert grammar["prefix"] == "<tool_call>\n" and grammar["suffix"] == "\n</tool_call>"
    schema = grammar["schema"]
    assert [v["properties"]["name"]["const"] for v in schema["anyOf"]] == ["get_weather", "search_web"]
    assert schema["anyOf"][0]["properties"]["arguments"] == TOOLS[0]["function"]["parameters"]
    assert schema["anyOf"][0]["required"] == ["name", "arguments"]
    single = P(TOOLS).call_grammar(TOOLS[:1])["schema"]
    assert single["properties"]["name"] == {"const": "get_weather"}


def test_reader_rejects_names_it_is_told_to():
    reader = JsonCallReader(lambda name: name == "ok")
    step = reader.feed('{"name": "nope", "arguments": {"a": 1}} tail')
    assert step.invalid and step.raw == '{"name": "nope", "arguments": {"a": 1}}' and step.rest == " tail"


def test_json_data_in_prose_is_not_held_back():
    deltas = feed_pieces(P, ['Result: {"city": "Paris", ', '"temp": 21} and more'])
    assert deltas[0].content == 'Result: {"city": "Paris", '
    assert deltas[1].content == '"temp": 21} and more'
    out = check_stream(P, 'Result: {"city": "Paris", "temp": 21} and more', TOOLS)
    assert out.content == 'Result: {"city": "Paris", "temp": 21} and more'


def test_whitespace_between_blocks_is_not_content():
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    out = check_stream(P, "Checking.\n" + call + "\n\n" + call + "\n", TOOLS)
    assert out.content == "Checking.\n" and len(out.tool_calls) == 2
