"""The traffic n-gram index: drafts from earlier outputs, bounded memory, no draft
across two sequences, collisions and overwritten places never proposed."""

from mlxcel.engine.prompt_lookup import TRAFFIC
from mlxcel.engine.traffic_ngrams import TrafficNgrams


def test_a_later_request_drafts_what_followed_the_same_ngram_before():
    index = TrafficNgrams(1024, 3)
    index.add([1, 2, 3, 10, 11, 12, 13, 14])
    proposal = index.draft([7, 8, 9, 1, 2, 3], limit=4)
    assert proposal.tokens == [10, 11, 12, 13]
    assert proposal.kind == TRAFFIC
    assert proposal.match == 3  # 9 did not precede 1, 2, 3 there


def test_the_match_reaches_back_as_far_as_the_history_agrees():
    index = TrafficNgrams(1024, 2)
    index.add([5, 6, 7, 8, 9, 20, 21])
    assert index.draft([0, 6, 7, 8, 9], limit=8).match == 4
    assert index.draft([6, 7, 8, 9], limit=8).tokens == [20, 21]  # the sequence's end ends the draft


def test_the_latest_occurrence_wins_and_no_draft_crosses_into_the_next_sequence():
    index = TrafficNgrams(1024, 2)
    index.add([1, 2, 3, 4])
    index.add([1, 2, 30, 40])
    assert index.draft([1, 2], limit=5).tokens == [30, 40]
    index.add([9, 9, 1, 2])  # 1, 2 at a sequence's end: nothing follows it there
    assert index.draft([1, 2], limit=5).tokens == [30, 40]
    assert index.draft([4], limit=5).tokens == []


def test_short_histories_limits_and_min_draft():
    index = TrafficNgrams(1024, 3)
    index.add([1, 2, 3, 4, 5, 6])
    assert index.draft([2, 3], limit=4).tokens == []
    assert index.draft([1, 2, 3], limit=0).tokens == []
    assert index.draft([1, 2, 3], limit=4, min_draft=4).tokens == []  # three left, fewer than four
    assert index.draft([1, 2, 3], limit=2).tokens == [4, 5]
    index.add([1, 2, 3])  # no longer than the n-gram: nothing to hold
    assert index.sequences == 1


def test_memory_stays_bounded_and_overwritten_places_are_not_proposed():
    index = TrafficNgrams(64, 2)
    index.add([1, 2, 3, 4, 5])
    for start in range(100, 2000, 10):
        index.add(list(range(start, start + 10)))
        assert len(index) <= index.capacity
    assert index.draft([1, 2], limit=3).tokens == []  # overwritten long ago
    assert index.draft([1980, 1981], limit=3).tokens == [1982, 1983, 1984]


def test_a_sequence_longer_than_a_quarter_of_the_ring_keeps_its_tail():
    index = TrafficNgrams(64, 2)
    index.add(list(range(1000, 1100)))
    assert index.draft([1000, 1001], limit=3).tokens == []
    assert index.draft([1090, 1091], limit=3).tokens == [1092, 1093, 1094]


def test_a_hash_collision_is_not_proposed(monkeypatch):
    index = TrafficNgrams(1024, 2)
    index.add([1, 2, 3, 4])
    key = hash((1, 2))
    # another n-gram whose key is the same: forge the entry
    index._followers[hash((7, 8))] = index._followers[key]
    assert index.draft([7, 8], limit=2).tokens == []
    assert index.draft([1, 2], limit=2).tokens == [3, 4]


def test_draft_chooser_offers_the_traffic_proposal_beside_prompt_lookup():
    from mlxcel.engine.draft_choice import DraftChooser
    from mlxcel.engine.draft_tracker import SlotAcceptance
    from mlxcel.engine.prompt_lookup import PromptLookup

    class _Request:
        constraint = None
        media = None
        max_tokens = -1
        cache_prompt = True
        prediction: list[int] | None = None

    class _Slot:
        request = _Request()
        forced_tokens: list = []
        shifted_keep = None
        budget = None
        n_past = 10
        n_generated = 0

    traffic = TrafficNgrams(1024, 3)
    traffic.add([40, 41, 42, 43, 44, 45, 46, 47])
    slot = _Slot()
    slot.lookup = PromptLookup(3, 8)
    slot.acceptance = SlotAcceptance(8)
    slot.cached_tokens = [1, 2, 3, 40, 41, 42]
    chooser = DraftChooser(None, 8, 2, None, 512, 4096, 512, traffic)
    option = chooser.option(slot, 1, 1.0)
    assert option is not None and option.traffic and option.tokens == [43, 44, 45, 46, 47]
    assert DraftChooser(None, 8, 2, None, 512, 4096, 512).option(slot, 1, 1.0) is None
    slot.request.prediction = [99, 98, 97]  # a request with a predicted output drafts from that alone
    assert chooser.option(slot, 1, 1.0) is None


def test_of_several_occurrences_the_one_matching_furthest_back_is_copied():
    # counting: " 3." follows "2." once and " 13." follows "12." later; history "... 2. 3"
    index = TrafficNgrams(1024, 2)
    one, two, three, four, dot = 1, 2, 3, 4, 9
    index.add([one, dot, two, dot, three, dot, four, dot, one, two, dot, one, three, dot, one, four])
    proposal = index.draft([7, two, dot, three, dot], limit=2)
    assert proposal.tokens == [four, dot]
    assert proposal.match == 4


def test_a_long_match_is_a_class_of_its_own():
    index = TrafficNgrams(1024, 3)
    replay = list(range(500, 530))
    index.add(replay)
    assert index.draft(replay[:20], limit=4).kind == TRAFFIC + 2  # 20 tokens back: an earlier output again
    assert index.draft([1, 2, *replay[:9]], limit=4).kind == TRAFFIC + 1
    assert index.draft([1, 2, *replay[10:13]], limit=4).kind == TRAFFIC
