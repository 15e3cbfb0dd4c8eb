"""Where compaction may split a history, and what it keeps."""

from __future__ import annotations

from mlxcel.api.responses.compaction import default_keep_tokens, item_text, split_history, valid_splits
from mlxcel.api.responses.input_items import SUMMARY_HEADING, SUMMARY_MARK
from tests.unit.responses_items import assistant, call, result, user


def ten(_item) -> int:
    return 10


def test_splits_fall_before_users_or_after_whole_tool_groups():
    turns = [user("a"), assistant("b"), user("c"), call("1"), call("2"), result("1"), result("2"), assistant("d"),
             user("e")]
    # 2: before user c; 7: after both results; 8: before user e. Not 6 (call 2's output after it).
    assert valid_splits(turns) == [2, 7, 8]
    assert 6 not in valid_splits(turns) and 4 not in valid_splits(turns)


def test_the_latest_user_message_is_always_kept():
    turns = [user("a"), assistant("b"), user("c"), assistant("d"), user("e")]
    split = split_history([{"role": "system", "content": "s"}, *turns], keep_tokens=1, item_tokens=ten)
    assert split.system == [{"role": "system", "content": "s"}]
    assert split.older == turns[:4] and split.retained == [user("e")]


def test_newer_whole_turns_fill_keep_tokens():
    turns = [user("a"), assistant("b"), user("c"), assistant("d"), user("e")]
    split = split_history(turns, keep_tokens=30, item_tokens=ten)
    assert split.older == turns[:2] and split.retained == turns[2:]
    # the first turn is summarized even when everything would fit: compaction was asked for
    assert split_history(turns, keep_tokens=1000, item_tokens=ten).older == turns[:2]


def test_a_tool_loop_after_the_last_user_message_stays_whole():
    turns = [user("a"), assistant("b"), user("c"), call("1"), result("1"), call("2"), result("2")]
    split = split_history(turns, keep_tokens=1, item_tokens=ten)
    assert split.older == turns[:2] and split.retained == turns[2:]


def test_an_earlier_summary_is_summarized_again():
    summary = {"type": "message", "role": "system", "content": SUMMARY_HEADING + "old", SUMMARY_MARK: True}
    items = [{"role": "system", "content": "s"}, summary, user("a"), assistant("b"), user("c")]
    split = split_history(items, keep_tokens=1000, item_tokens=ten)
    assert split.system == [{"role": "system", "content": "s"}]
    assert split.older[0] is summary and split.retained[-1] == user("c")
    assert item_text(summary) == SUMMARY_HEADING + "old"


def test_nothing_older_means_nothing_to_compact():
    assert split_history([user("only")], keep_tokens=1, item_tokens=ten).older == []


def test_default_keep_tokens():
    assert default_keep_tokens(1024) == 64 and default_keep_tokens(10**6) == 8192
