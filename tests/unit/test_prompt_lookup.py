"""Prompt-lookup proposals: what followed the longest earlier match of the tail."""

from mlxcel.engine.prompt_lookup import PREDICTED, REJOINED, PromptLookup, match_class


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


def test_a_prediction_is_drafted_from_the_output_s_first_token_while_the_output_follows_it():
    prompt = [1, 2, 3]
    prediction = [40, 41, 42, 43, 44, 45]
    lookup = PromptLookup(ngram=2, max_draft=3, prediction=prediction, output_start=len(prompt))
    first = lookup.predicted(prompt + [40], limit=10)  # the first token came from the prompt's logits
    assert first.tokens == [41, 42, 43] and first.predicted and first.kind == PREDICTED
    assert lookup.predicted(prompt + [40, 41, 42, 43], limit=10).tokens == [44, 45]
    assert lookup.predicted(prompt + [40, 41, 42, 43, 44, 45], limit=10).tokens == []  # the prediction is spent
    assert lookup.draft(prompt + [40], limit=10).tokens == []  # the history's own proposal knows nothing of it


def test_after_the_output_departs_from_its_prediction_a_match_rejoins_it():
    """An edit: the reply changes one token of the predicted file, then copies the rest;
    the prediction's continuation is proposed once the tail matches it again."""
    prompt = [1, 2, 3]
    prediction = [40, 41, 42, 43, 44, 45, 46, 47]
    lookup = PromptLookup(ngram=2, max_draft=4, prediction=prediction, output_start=len(prompt))
    assert lookup.predicted(prompt + [40, 41, 99], limit=10).tokens == []  # departed: 41, 99 occurs nowhere
    rejoined = lookup.predicted(prompt + [40, 41, 99, 43, 44], limit=10)
    assert rejoined.tokens == [45, 46, 47] and rejoined.predicted
    assert rejoined.kind == REJOINED and rejoined.match == 2
    # it never goes back to drafting along the prediction from its start
    assert lookup.predicted(prompt + [40, 41, 99, 43, 44, 45], limit=10).kind == REJOINED


def test_without_a_prediction_proposals_are_classed_by_their_match():
    lookup = PromptLookup(ngram=1, max_draft=3)
    proposal = lookup.draft([5, 6, 7, 5], limit=3)
    assert proposal.kind == match_class(proposal.match) and not proposal.predicted
    assert lookup.predicted([5, 6, 7, 5], limit=3).tokens == []


def test_a_long_prediction_is_indexed_a_share_at_a_time():
    """Its n-grams are indexed a bounded share per draft, so a long prediction never
    holds a step; a match past the indexed part is found once the index reaches it."""
    from mlxcel.engine import prompt_lookup

    step = prompt_lookup.PREDICTION_INDEX_STEP
    prediction = list(range(1000, 1000 + 3 * step)) + [7, 8, 9, 10]
    lookup = PromptLookup(ngram=2, max_draft=2, prediction=prediction, output_start=1)
    history = [0, 5, 7, 8]  # departed at once; (7, 8) sits past two shares of the index
    assert lookup.predicted(history, limit=2).tokens == []
    assert lookup.predicted(history, limit=2).tokens == []
    assert lookup.predicted(history, limit=2).tokens == []
    assert lookup.predicted(history, limit=2).tokens == [9, 10]
