"""The sentence splitter that feeds text to speech one sentence at a time."""

from __future__ import annotations

import pytest

from mlxcel.speech.sentences import split_sentences


@pytest.mark.parametrize(("text", "expected"), [
    ("Hello there. How are you? Fine!", ["Hello there.", "How are you?", "Fine!"]),
    ("Mr. Smith met Dr. Jones at St. Mary's.", ["Mr. Smith met Dr. Jones at St. Mary's."]),
    ("It costs $3.50, i.e. a bargain. Buy it.", ["It costs $3.50, i.e. a bargain.", "Buy it."]),
    ("J. R. R. Tolkien wrote it. Then he slept.", ["J. R. R. Tolkien wrote it.", "Then he slept."]),
    ("Pi is 3.14159 exactly. Not really.", ["Pi is 3.14159 exactly.", "Not really."]),
    ("See No. 5 and Fig. 3 here. I said no. Then left.", ["See No. 5 and Fig. 3 here.", "I said no.", "Then left."]),
    ("We bought apples, pears, etc. They were fresh.", ["We bought apples, pears, etc.", "They were fresh."]),
    ("Wait... what was that? Nothing.", ["Wait... what was that?", "Nothing."]),
    ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),
    ("It ends at 5 p.m. Then we eat.", ["It ends at 5 p.m.", "Then we eat."]),
    ("No punctuation at the end", ["No punctuation at the end"]),
    ("   ", []),
    ("Null\x00 bytes\x07 go. Away\x1b.", ["Null bytes go.", "Away ."]),
])
def test_sentences(text, expected):
    assert split_sentences(text) == expected


def test_line_breaks_end_headings_and_list_items_but_not_wrapped_prose():
    text = "# Title\nThis line is\nwrapped here. Next one.\n\n- item one\n- item two\n1. first\r\nLast line"
    assert split_sentences(text) == ["# Title", "This line is wrapped here.", "Next one.", "- item one", "- item two",
                                     "1. first", "Last line"]


def test_long_sentences_are_cut_at_a_comma_else_a_space_else_anywhere():
    clauses = ", ".join(["the rain kept falling on the roof"] * 30) + "."
    pieces = split_sentences(clauses, max_chars=100)
    assert all(len(p) <= 100 for p in pieces)
    assert all(p.endswith(",") for p in pieces[:-1])
    assert " ".join(pieces) == clauses
    words = " ".join(["word"] * 100)
    pieces = split_sentences(words, max_chars=50)
    assert all(len(p) <= 50 for p in pieces) and " ".join(pieces) == words
    assert split_sentences("x" * 250, max_chars=100) == ["x" * 100, "x" * 100, "x" * 50]
