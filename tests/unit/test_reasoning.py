"""Reasoning split (streaming and final) and the rolling-checkpoint rule for prior turns."""

from __future__ import annotations

import copy
import random

import pytest

from mlxcel.chat.reasoning import ReasoningSplitter, split_reasoning, strip_prior_reasoning, strip_think_blocks


def _stream(pieces, start_in_reasoning):
    splitter = ReasoningSplitter(start_in_reasoning)
    reasoning, content = [], []
    for piece in pieces:
        out = splitter.feed(piece)
        reasoning.append(out.reasoning)
        content.append(out.content)
    out = splitter.finish()
    reasoning.append(out.reasoning)
    content.append(out.content)
    return "".join(reasoning), "".join(content)


# (text, start_in_reasoning, expected reasoning, expected content)
CASES = [
    ("<think>\nLet me see.\n</think>\n\nHello!", False, "Let me see.", "Hello!"),
    ("Let me see.\n</think>\n\nHello!", True, "Let me see.", "Hello!"),
    ("\n\n<think>a\n\nb</think>x", False, "a\n\nb", "x"),
    ("<think>\n\n</think>\n\nHello", False, "", "Hello"),  # Qwen3 with thinking off
    ("<think></think>Hello", False, "", "Hello"),
    ("Hello there", False, "", "Hello there"),
    ("  Hello", False, "", "  Hello"),  # no block: leading whitespace is content
    ("\n\n", False, "", "\n\n"),
    ("", False, "", ""),
    ("", True, "", ""),
    ("still thinking when cut off", True, "still thinking when cut off", ""),
    ("<think>cut off mid", False, "cut off mid", ""),
    ("<think>cut off at </thi", False, "cut off at </thi", ""),
    ("<thi", False, "", "<thi"),
    ("<thinking>x", False, "", "<thinking>x"),
    ("<think>a<think>b</think>c", False, "a<think>b", "c"),
    ("<think>\n<think>a</think>b", False, "a", "b"),
    ("<think>\nre-emitted</think>ok", True, "re-emitted", "ok"),
    ("Answer: <think>not reasoning</think> done", False, "", "Answer: <think>not reasoning</think> done"),
    ("<think>a</think>b<think>c</think>d", False, "a", "b<think>c</think>d"),
    ("<think>a</think>\n\n<think>c</think>d", False, "a", "<think>c</think>d"),
    ("a </think> b", False, "", "a </think> b"),
    ("r</think>c</think>d", True, "r", "c</think>d"),
    ("<think>x < y and </ not a marker</think>ok", False, "x < y and </ not a marker", "ok"),
    ("<think>  spaced  \t\n</think>  \n\t content  \n", False, "spaced", "content  \n"),
    ("<think>\n\ninner\n\n\n</think>", False, "inner", ""),
]


@pytest.mark.parametrize("text,start,reasoning,content", CASES)
def test_final_split(text, start, reasoning, content):
    assert split_reasoning(text, start) == (reasoning, content)


@pytest.mark.parametrize("text,start,reasoning,content", CASES)
def test_streaming_matches_final_at_every_boundary(text, start, reasoning, content):
    assert _stream([text], start) == (reasoning, content)
    assert _stream(list(text), start) == (reasoning, content)
    for cut in range(len(text) + 1):
        assert _stream([text[:cut], text[cut:]], start) == (reasoning, content), cut


def test_streaming_matches_final_on_random_splits():
    rng = random.Random(7)
    alphabet = ["<think>", "</think>", "<", "</", "<th", "</th", "\n", " ", "a", "b", "think>", "\t"]
    for _ in range(400):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        for start in (False, True):
            expected = split_reasoning(text, start)
            cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text) + 1, rng.randint(0, 5))))
            pieces, prev = [], 0
            for cut in cuts:
                pieces.append(text[prev:cut])
                prev = cut
            pieces.append(text[prev:])
            assert _stream(pieces, start) == expected, (text, start, pieces)


def test_markers_never_leak_and_partials_are_held():
    splitter = ReasoningSplitter(False)
    assert not splitter.feed("<th")
    assert not splitter.feed("ink>\n")
    out = splitter.feed("plan </thi")
    assert (out.reasoning, out.content) == ("plan", "")
    out = splitter.feed("nk>\n\nHi")
    assert (out.reasoning, out.content) == ("", "Hi")
    assert not splitter.finish()


def test_partial_marker_released_when_it_is_not_one():
    splitter = ReasoningSplitter(True)
    assert splitter.feed("a </th").reasoning == "a"
    assert splitter.feed("ree").reasoning == " </three"


def test_reasoning_whitespace_is_held_until_more_reasoning_arrives():
    splitter = ReasoningSplitter(True)
    assert splitter.feed("one\n\n").reasoning == "one"
    assert splitter.feed("two").reasoning == "\n\ntwo"
    assert splitter.feed("\n").reasoning == ""
    assert splitter.finish().reasoning == ""


def test_custom_markers():
    assert split_reasoning("[THINK]x[/THINK] y", False, "[THINK]", "[/THINK]") == ("x", "y")


# --- strip_prior_reasoning ---------------------------------------------------


def _conversation():
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "<think>\nr1\n</think>\n\na1", "reasoning_content": "r1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "<think>r2</think>calling", "tool_calls": [{"id": "c"}]},
        {"role": "tool", "content": "42"},
        {"role": "user", "content": "<tool_response>\n43\n</tool_response>"},
        {"role": "assistant", "content": "<think>r3</think>\n\na3", "reasoning_content": "r3"},
    ]


def test_strips_before_the_last_real_user_turn_only():
    messages = _conversation()
    before = copy.deepcopy(messages)
    out = strip_prior_reasoning(messages, preserve=False)
    assert messages == before  # input untouched
    assert out[2] == {"role": "assistant", "content": "a1"}
    # after q2 (the latest user turn that is not a tool result) everything is kept
    assert out[4:] == messages[4:]
    assert out[:2] == messages[:2]


def test_tool_result_user_turns_do_not_count_as_the_query():
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<think>x</think>call"},
        {"role": "user", "content": "  <tool_response>r</tool_response>\n"},
        {"role": "assistant", "content": "<think>y</think>done"},
    ]
    assert strip_prior_reasoning(messages, preserve=False) == messages


def test_latest_query_moves_the_checkpoint():
    messages = _conversation() + [{"role": "user", "content": "q3"}]
    out = strip_prior_reasoning(messages, preserve=False)
    assert [m["content"] for m in out if m["role"] == "assistant"] == ["a1", "calling", "a3"]
    assert all("reasoning_content" not in m for m in out)
    assert out[4]["tool_calls"] == [{"id": "c"}]


def test_preserve_keeps_everything_in_new_dicts():
    messages = _conversation() + [{"role": "user", "content": "q3"}]
    out = strip_prior_reasoning(messages, preserve=True)
    assert out == messages
    assert all(a is not b for a, b in zip(out, messages))


def test_list_content_and_no_user_turn():
    messages = [
        {"role": "assistant", "content": [{"type": "text", "text": "<think>r</think>a"}], "reasoning": "r"},
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}}]},
    ]
    before = copy.deepcopy(messages)
    out = strip_prior_reasoning(messages, preserve=False)
    assert out[0] == {"role": "assistant", "content": [{"type": "text", "text": "a"}]}
    assert messages == before
    only_assistant = [{"role": "assistant", "content": "<think>r</think>a"}]
    assert strip_prior_reasoning(only_assistant, preserve=False) == only_assistant


def test_strip_think_blocks():
    assert strip_think_blocks("plain") == "plain"
    assert strip_think_blocks("<think>\nr\n</think>\n\nanswer") == "answer"
    assert strip_think_blocks("opened by the prompt</think>\n\nanswer") == "answer"
    assert strip_think_blocks("<think>cut off") == ""
    assert strip_think_blocks("x <think>mid</think> y") == "x  y"
