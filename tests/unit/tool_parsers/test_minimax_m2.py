"""MiniMax M2: <minimax:tool_call><invoke name=...><parameter name=...>."""

from __future__ import annotations

from mlxcel.chat.tool_parsers.minimax_m2 import MiniMaxM2Parser
from tests.unit.tool_parser_harness import check_stream, stream
from tests.unit.tool_parsers.tools import TYPED_TOOLS as TOOLS
from tests.unit.tool_parsers.tools import args

P = MiniMaxM2Parser


def test_prose_then_one_call():
    text = (
        "I'll look up the weather in Paris for you.\n\n"
        "<minimax:tool_call>\n"
        '<invoke name="get_weather">\n'
        '<parameter name="city">Paris</parameter>\n'
        '<parameter name="days">3</parameter>\n'
        "</invoke>\n"
        "</minimax:tool_call>"
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == "I'll look up the weather in Paris for you."
    assert [c.name for c in out.tool_calls] == ["get_weather"]
    assert out.tool_calls[0].arguments == '{"city":"Paris","days":3}'
    assert out.tool_calls[0].id.startswith("call_")


def test_two_invokes_in_one_block_and_a_second_block():
    text = (
        "<minimax:tool_call>\n"
        '<invoke name="get_weather"><parameter name="city">Oslo</parameter></invoke>\n'
        '<invoke name="search_web"><parameter name="query">Oslo events</parameter>'
        '<parameter name="limit">5</parameter></invoke>\n'
        "</minimax:tool_call>\n"
        "<minimax:tool_call>\n"
        '<invoke name="get_weather"><parameter name="city">Bergen</parameter></invoke>\n'
        "</minimax:tool_call>"
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == ""
    assert [c.name for c in out.tool_calls] == ["get_weather", "search_web", "get_weather"]
    assert args(out.tool_calls[1]) == {"query": "Oslo events", "limit": 5}
    assert args(out.tool_calls[2]) == {"city": "Bergen"}
    assert len({c.id for c in out.tool_calls}) == 3


def test_no_call_is_plain_content():
    text = "Paris is the capital of France.\nIt has about 2.1 million people.\n"
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_false_alarm_partial_marker_is_released():
    text = "Compare a<b and <minimal> tags, or <invoke> alone.</minimax:x>"
    out = check_stream(P, text, TOOLS)
    assert out.content == text and out.tool_calls == []


def test_schema_coercion_of_each_type_and_unicode():
    text = (
        "Je vérifie la météo à Zürich ☀️\n"
        "<minimax:tool_call>\n"
        '<invoke name="get_weather">\n'
        '<parameter name="city">Zürich 東京</parameter>\n'
        '<parameter name="days">7</parameter>\n'
        '<parameter name="units">celsius</parameter>\n'
        '<parameter name="detailed">True</parameter>\n'
        '<parameter name="threshold">0.5</parameter>\n'
        '<parameter name="note">null</parameter>\n'
        '<parameter name="filters">{"min_temp": -3, "label": "cold"}</parameter>\n'
        "<parameter name=\"tags\">['snow', 'wind']</parameter>\n"
        "</invoke>\n"
        "</minimax:tool_call>\n"
        "Un instant."
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == "Je vérifie la météo à Zürich ☀️\nUn instant."
    assert args(out.tool_calls[0]) == {
        "city": "Zürich 東京",
        "days": 7,
        "units": "celsius",
        "detailed": True,
        "threshold": 0.5,
        "note": None,
        "filters": {"min_temp": -3, "label": "cold"},
        "tags": ["snow", "wind"],
    }
    assert "東京" in out.tool_calls[0].arguments  # not \\u-escaped


def test_string_parameter_keeps_its_text_exactly():
    code = "def f(x):\n    return x < 3 and '<b>'\n"
    text = (
        '<minimax:tool_call><invoke name="search_web">'
        f'<parameter name="query">{code}</parameter><parameter name="limit"> 10 </parameter>'
        "</invoke></minimax:tool_call>"
    )
    out = check_stream(P, text, TOOLS)
    assert args(out.tool_calls[0]) == {"query": code, "limit": 10}


def test_undeclared_tool_values_read_loosely():
    text = '<minimax:tool_call><invoke name="lookup"><parameter name="id">17</parameter><parameter name="q">x y</parameter></invoke></minimax:tool_call>'
    out = check_stream(P, text, TOOLS)
    assert out.tool_calls[0].name == "lookup"
    assert args(out.tool_calls[0]) == {"id": 17, "q": "x y"}


def test_bare_invoke_without_wrapper():
    text = 'Checking.\n<invoke name="get_weather"><parameter name="city">Lima</parameter></invoke>'
    out = check_stream(P, text, TOOLS)
    assert out.content == "Checking."
    assert args(out.tool_calls[0]) == {"city": "Lima"}


def test_unfinished_block_keeps_complete_invokes_only():
    text = (
        "Sure.\n<minimax:tool_call>\n"
        '<invoke name="get_weather"><parameter name="city">Rome</parameter></invoke>\n'
        '<invoke name="search_web"><parameter name="query">Rome mus'
    )
    out = check_stream(P, text, TOOLS)
    assert out.content == "Sure."
    assert [c.name for c in out.tool_calls] == ["get_weather"]


def test_markup_never_streams_as_content():
    text = 'A<minimax:tool_call><invoke name="get_weather"><parameter name="city">X</parameter></invoke></minimax:tool_call>B'
    delta = stream(P, list(text), TOOLS)
    assert delta.content == "AB"
    assert [d.index for d in delta.tool_calls] == [0, 0]


def test_matches_template():
    template = (
        "{%- for tool_call in message.tool_calls -%}\n"
        "{{- '<minimax:tool_call>\\n' }}<invoke name=\"{{ tool_call.function.name }}\">\n"
        "{% for k, v in tool_call.function.arguments.items() %}<parameter name=\"{{ k }}\">{{ v }}</parameter>\n{% endfor %}"
        "</invoke>\n{{- '</minimax:tool_call>' }}{%- endfor -%}"
    )
    assert P.matches_template(template)
    assert not P.matches_template("<tool_call>\n{{ tool_call | tojson }}\n</tool_call>")
