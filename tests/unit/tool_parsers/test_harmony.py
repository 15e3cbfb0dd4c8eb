from mlxcel.chat.tool_parsers.harmony import HarmonyParser
from tests.unit.tool_parser_harness import check_stream, random_pieces, stream
from tests.unit.tool_parsers.tools import TOOLS, args

P = HarmonyParser


def check(text: str, tools=TOOLS):
    """check_stream plus: streamed reasoning equals the parse's reasoning."""
    out = check_stream(P, text, tools)
    import random

    rng = random.Random(7)
    for pieces in [[text], list(text)] + [random_pieces(text, rng) for _ in range(20)]:
        assert stream(P, pieces, tools).reasoning == out.reasoning
    return out


def test_reasoning_then_call():
    text = (
        "<|channel|>analysis<|message|>User wants the weather in Paris. Use get_weather.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Paris","days":2}<|call|>'
    )
    out = check(text)
    assert out.content == "" and out.reasoning == "User wants the weather in Paris. Use get_weather."
    assert out.tool_calls[0].name == "get_weather" and out.tool_calls[0].arguments == '{"city":"Paris","days":2}'


def test_final_answer_is_content():
    text = (
        "<|channel|>analysis<|message|>Simple greeting.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! ¿Cómo estás? Use <|x|> and {braces}.<|return|>"
    )
    out = check(text)
    assert out.content == "Hello! ¿Cómo estás? Use <|x|> and {braces}." and out.reasoning == "Simple greeting."
    assert not out.tool_calls


def test_preamble_and_two_calls_recipient_in_role():
    text = (
        "<|channel|>commentary<|message|>Checking two things.<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Oslo\"}<|call|>"
        "<|start|>assistant<|channel|>commentary to=functions.search_web <|constrain|>json"
        '<|message|>{"query": "a}{b", "nested": {"x": [1]}}<|call|>'
    )
    out = check(text)
    assert out.content == "Checking two things."
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web"]
    assert args(out.tool_calls[1]) == {"query": "a}{b", "nested": {"x": [1]}}


def test_plain_text_without_markup():
    text = "Just an answer with a <| partial and <|channel but nothing else"
    out = check(text)
    assert not out.tool_calls
    assert out.content == text
    out = check("Hi there<|end|><|start|>assistant<|channel|>fin")
    assert out.content == "Hi there"  # an unfinished header is markup only


def test_unterminated_call():
    text = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Rome"}'
    out = check(text)
    assert args(out.tool_calls[0]) == {"city": "Rome"}
    text = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Ro'
    out = check(text)
    assert not out.tool_calls and out.content == '{"city": "Ro'


def test_matches_template():
    assert P.matches_template("{{- '<|start|>assistant<|channel|>' + channel + '<|message|>' }}")
    assert not P.matches_template("<tool_call>")
