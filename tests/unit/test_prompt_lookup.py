"""Prompt-lookup proposals: what followed the longest earlier match of the tail."""

from mlxcel.engine.prompt_lookup import PromptLookup, match_class


def test_prompt_lookup_drafts_what_followed_the_last_ngram():
    lookup = PromptLookup(ngram=2, max_draft=4)
    history = [1, 2, 3, 4, 5, 6, 9, 1, 2]
    assert lookup.draft(history, limit=10).tokens == [3, 4, 5, 6]
    assert lookup.draft(history, limit=2).tokens == [3, 4]
    history += [7, 8]  # the tail 7, 8 never occurred before
    assert lookup.draft(history, limit=10).tokens == []
    history += [1, 2]  # the latest earlier occurrence of (1, 2) is followed by 7, 8
    assert lookup.draft(history, limit=10).tokens == [7, 8, 1, 2]


def test_prompt_lookup_reindexes_after_a_cut():
    lookup = PromptLookup(ngram=1, max_draft=3)
    assert lookup.draft([5, 6, 7, 5], limit=3).tokens == [6, 7, 5]
    assert lookup.draft([8, 9, 8], limit=3).tokens == [9, 8]


def test_the_longest_match_wins_over_the_latest():
    """Lines that differ only in a number: the copy continues from the line being
    copied (which matches further back), not from the last similar line."""
    line = [50, 51, 52, 53]
    source = [10, *line, 11, 60, 20, *line, 21, 61, 30, *line, 31, 62]
    copy = [10, *line, 11, 60, 20, *line]  # copying `source`; now at the second line's end
    lookup = PromptLookup(ngram=2, max_draft=3)
    proposal = lookup.draft(source + [99] + copy, limit=3)
    assert proposal.tokens == [21, 61, 30]  # the latest occurrence would say 11, 60, 20
    assert proposal.match == len(copy)  # the whole copy so far matches the source


def test_match_classes_split_short_medium_and_long_matches():
    assert [match_class(n) for n in (3, 7, 8, 15, 16, 60)] == [0, 0, 1, 1, 2, 2]
