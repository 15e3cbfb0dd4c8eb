"""ChatOutputParser: the reasoning split, then tool-call parsing, streamed piece by
piece; the streamed content, reasoning and calls (with what `final` says is still
owed) must equal the final parse however the text is cut."""

from __future__ import annotations

import json
import random

from mlxcel.chat.deltas import ParsedDelta, ParsedOutput, ToolCallDelta
from mlxcel.chat.output import ChatOutputParser, FinalChat
from mlxcel.chat.reasoning import ReasoningMarkers
from mlxcel.chat.tool_parsers import TOOL_PARSERS
from mlxcel.chat.tool_parsers.base import ToolCallParser
from tests.unit.tool_parser_harness import random_pieces
from tests.unit.tool_parsers.tools import TOOLS

HERMES = TOOL_PARSERS["hermes"]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
ARGUMENTS = '{"city": "Paris", "days": 3}'


def run(pieces: list[str], **options) -> tuple[ParsedDelta, FinalChat, list[ToolCallDelta]]:
    options = {"parse_reasoning": True, "start_in_reasoning": False, "tool_parser_cls": HERMES, "tools": TOOLS,
               **options}
    parser = ChatOutputParser(**options)
    streamed = ParsedDelta()
    for piece in pieces:
        streamed.extend(parser.feed(piece))
    streamed.extend(parser.finish())
    final, owed = parser.final()
    return streamed, final, owed


def assembled_calls(deltas: list[ToolCallDelta]) -> list[tuple[str, str, str]]:
    """(id, name, arguments) per call, from its deltas in order."""
    calls: dict[int, list[str]] = {}
    for d in deltas:
        if d.index not in calls:
            assert d.id and d.name and d.arguments == "", d
            calls[d.index] = [d.id, d.name, ""]
        else:
            assert d.id in (None, calls[d.index][0]) and d.name in (None, calls[d.index][1]), d
            calls[d.index][2] += d.arguments
    assert sorted(calls) == list(range(len(calls)))
    return [tuple(calls[i]) for i in range(len(calls))]


def check_agree(text: str, **options) -> FinalChat:
    """Stream `text` cut every way; streamed and final parses agree each time, and
    the stream carried every call whole (nothing owed)."""
    cuts = [[text], list(text)] + [[text[:i], text[i:]] for i in range(1, len(text))]
    rng = random.Random(len(text))
    cuts += [random_pieces(text, rng) for _ in range(30)]
    first = None
    for pieces in cuts:
        streamed, final, owed = run(pieces, **options)
        assert streamed.content == final.content, pieces
        assert streamed.reasoning == final.reasoning, pieces
        assert owed == [], pieces
        assert assembled_calls(streamed.tool_calls) == [(c.id, c.name, c.arguments) for c in final.tool_calls]
        if first is None:
            first = final
        assert (final.content, final.reasoning) == (first.content, first.reasoning)
        assert [(c.name, c.arguments) for c in final.tool_calls] == [(c.name, c.arguments) for c in first.tool_calls]
    return first


def test_reasoning_content_and_a_tool_call():
    final = check_agree(f"<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n{CALL}")
    assert final.reasoning == "The user wants the weather."
    assert final.content == "Let me check.\n"
    assert [(c.name, json.loads(c.arguments)) for c in final.tool_calls] == [("get_weather", {"city": "Paris",
                                                                                              "days": 3})]


def test_reasoning_opened_by_the_prompt():
    final = check_agree("Thinking it over.\n</think>\nThe answer is 4.", start_in_reasoning=True)
    assert (final.reasoning, final.content, final.tool_calls) == ("Thinking it over.", "The answer is 4.", [])


def test_a_tool_call_inside_reasoning_is_not_a_call():
    final = check_agree(f"<think>Maybe {CALL}?</think>Done.")
    assert final.reasoning == f"Maybe {CALL}?" and final.content == "Done." and final.tool_calls == []


def test_other_reasoning_markers():
    markers = ReasoningMarkers("[THINK]", "[/THINK]")
    final = check_agree("[THINK]hmm[/THINK]Yes.", markers=markers)
    assert (final.reasoning, final.content) == ("hmm", "Yes.")


def test_without_reasoning_parsing_or_tools_the_markup_is_content():
    text = f"<think>x</think>{CALL}"
    final = check_agree(text, parse_reasoning=False, tools=[])
    assert (final.content, final.reasoning, final.tool_calls) == (text, "", [])
    final = check_agree(text, tool_parser_cls=None)
    assert (final.reasoning, final.content, final.tool_calls) == ("x", CALL, [])


class _HoldsEverything(ToolCallParser):
    """Streams nothing but the text outside calls; only the final parse finds calls."""

    name = "test-holds-everything"
    detect_priority = 10_000
    names_at_finish = False

    def __init__(self, tools=None) -> None:
        super().__init__(tools)
        self._text = ""

    @classmethod
    def matches_template(cls, template: str) -> bool:
        return False

    def feed(self, text: str) -> ParsedDelta:
        self._text += text
        return ParsedDelta()

    def finish(self) -> ParsedDelta:
        parsed = self.parse(self._text)
        calls = [ToolCallDelta(i, id=None, name=c.name) for i, c in enumerate(parsed.tool_calls)]
        return ParsedDelta(content=parsed.content, tool_calls=calls if self.names_at_finish else [])

    def parse(self, text: str) -> ParsedOutput:
        return HERMES(self.tools).parse(text)


class _NamesAtFinish(_HoldsEverything):
    name = "test-names-at-finish"
    names_at_finish = True


def test_final_owes_the_calls_a_stream_did_not_finish():
    streamed, final, owed = run([f"Sure. {CALL}"], tool_parser_cls=_HoldsEverything)
    assert streamed.tool_calls == []
    call = final.tool_calls[0]
    assert owed == [ToolCallDelta(0, id=call.id, name="get_weather", arguments=""),
                    ToolCallDelta(0, arguments=ARGUMENTS)]
    streamed, final, owed = run([f"Sure. {CALL}"], tool_parser_cls=_NamesAtFinish)
    assert [(d.name, d.arguments) for d in streamed.tool_calls] == [("get_weather", "")]
    assert final.tool_calls[0].id == streamed.tool_calls[0].id  # the streamed id is kept
    assert owed == [ToolCallDelta(0, arguments=ARGUMENTS)]
    assert streamed.content == final.content == "Sure. "


def reasoning_tokens_streamed(tokens: list[str], continued: str = "", tail: str = "", **options) -> int:
    options = {"parse_reasoning": True, "start_in_reasoning": False, "tool_parser_cls": None, "tools": [],
               **options}
    parser = ChatOutputParser(**options)
    parser.feed(continued, token=False)
    for token in tokens:
        parser.feed(token)
    parser.feed(tail, token=False)
    parser.finish()
    return parser.final()[0].reasoning_tokens


def reasoning_tokens_whole(tokens: list[str], continued: str = "", tail: str = "", **options) -> int:
    options = {"parse_reasoning": True, "start_in_reasoning": False, "tool_parser_cls": None, "tools": [],
               **options}
    parser = ChatOutputParser(**options)
    parser.feed(continued, token=False)
    parser.add_text("".join(tokens) + tail, [len(t) for t in tokens])
    return parser.final()[0].reasoning_tokens


def test_reasoning_tokens_are_the_generated_tokens_of_the_block():
    """usage's reasoning_tokens: the tokens whose text lies in the reasoning block
    (markers included, a token that straddles its end too), the same streamed or whole."""
    cases = [
        (["a", " b", "</think>", "\n\nHi", " there"], {"start_in_reasoning": True}, 3),
        (["\n", "<think>", "x", "</", "think>", "Hi"], {}, 5),
        (["ab</thi", "nk>Hello", " you"], {"start_in_reasoning": True}, 2),
        (["Hi", " <think>", "x", "</think>"], {}, 0),  # not a leading block: content
        (["<think>", "\n", "</think>", "Hi"], {}, 0),  # only whitespace: no reasoning
        (["<think>", "still", " thinking"], {}, 3),  # never closed: every token
        (["[THINK]", "x", "[/THINK]", "y"], {"markers": ReasoningMarkers("[THINK]", "[/THINK]")}, 3),
        (["a", "</think>", "b"], {"start_in_reasoning": True, "parse_reasoning": False}, 0),
    ]
    for tokens, options, expected in cases:
        assert reasoning_tokens_streamed(tokens, **options) == expected, tokens
        assert reasoning_tokens_whole(tokens, **options) == expected, tokens


def test_reasoning_tokens_leave_out_text_no_token_made():
    """A continued message's text is parsed but was not generated; released held-back
    text adds characters, not tokens."""
    assert reasoning_tokens_streamed(["c", "</think>", "Hi"], continued="<think>ab") == 2
    assert reasoning_tokens_whole(["c", "</think>", "Hi"], continued="<think>ab") == 2
    assert reasoning_tokens_streamed(["c", "d"], continued="<think>ab", tail="</think>Hi") == 2
    assert reasoning_tokens_streamed(["Hi"], continued="<think>ab</think>") == 0


SECOND = '<tool_call>\n{"name": "get_time", "arguments": {"timezone": "UTC"}}\n</tool_call>'


def test_one_call_allowed_ends_the_output_where_a_second_begins():
    """max_tool_calls=1 (parallel calls off): the stream sends the first call only, says
    when a second one began (the turn then stops the generation), and drops everything
    from there on, including text generated before the stop lands."""
    parser = ChatOutputParser(parse_reasoning=True, start_in_reasoning=False, tool_parser_cls=HERMES,
                              tools=TOOLS, max_tool_calls=1)
    streamed = ParsedDelta()
    pieces = list("Sure. " + CALL + "\n" + SECOND + " trailing words")
    over_at = None
    for n, piece in enumerate(pieces):
        streamed.extend(parser.feed(piece))
        if parser.over_limit and over_at is None:
            over_at = n
    streamed.extend(parser.finish())
    final, owed = parser.final()
    assert over_at is not None and over_at < len("Sure. " + CALL + "\n" + SECOND) - 10  # at the name, not later
    assert {d.index for d in streamed.tool_calls} == {0}
    assert [(c.name, c.arguments) for c in final.tool_calls] == [("get_weather", ARGUMENTS)]
    assert final.content == streamed.content and "tool_call" not in final.content and "trailing" not in final.content
    assert final.content.strip() == "Sure."
    assert assembled_calls(streamed.tool_calls + owed)[0][1:] == ("get_weather", ARGUMENTS)


def test_one_call_allowed_on_a_whole_generation_and_without_a_limit():
    whole = ChatOutputParser(parse_reasoning=True, start_in_reasoning=False, tool_parser_cls=HERMES, tools=TOOLS,
                             max_tool_calls=1)
    whole.add_text(CALL + "\n" + SECOND)
    assert [c.name for c in whole.final()[0].tool_calls] == ["get_weather"]
    _, final, _ = run(list(CALL + "\n" + SECOND))
    assert [c.name for c in final.tool_calls] == ["get_weather", "get_time"]
    one = ChatOutputParser(parse_reasoning=True, start_in_reasoning=False, tool_parser_cls=HERMES, tools=TOOLS,
                           max_tool_calls=1)
    for piece in CALL:
        one.feed(piece)
    assert not one.over_limit  # one call is within the limit
