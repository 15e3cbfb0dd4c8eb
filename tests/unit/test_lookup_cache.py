"""llama.cpp's lookup caches: the file format, the drafts, the dynamic counts."""

from __future__ import annotations

import struct

import pytest

from mlxcel.engine.lookup_cache import NULL, LookupCacheError, LookupCaches, StaticCounts, read_counts, write_counts
from mlxcel.engine.prompt_lookup import LOOKUP_CACHE

N_VOCAB = 1000


def record(ngram: tuple[int, ...], followers: dict[int, int]) -> bytes:
    """One record as llama.cpp's common_ngram_cache_save writes it."""
    padded = list(ngram) + [NULL] * (4 - len(ngram))
    out = struct.pack("<4ii", *padded, len(followers))
    for token, count in followers.items():
        out += struct.pack("<ii", token, count)
    return out


def test_a_file_llama_cpp_wrote_is_read_with_every_ngram_length(tmp_path):
    path = tmp_path / "cache.bin"
    path.write_bytes(record((5,), {6: 2}) + record((5, 6), {7: 3, 8: 1}) + record((1, 2, 3), {4: 1})
                     + record((1, 2, 3, 4), {5: 9}))
    assert read_counts(path, N_VOCAB) == {(5,): {6: 2}, (5, 6): {7: 3, 8: 1}, (1, 2, 3): {4: 1},
                                          (1, 2, 3, 4): {5: 9}}


def test_what_is_written_is_llama_cpp_s_layout_and_reads_back(tmp_path):
    counts = {(5, 6): {7: 3}, (9,): {1: 1, 2: 4}}
    path = tmp_path / "out.bin"
    write_counts(path, counts)
    assert path.read_bytes() == record((5, 6), {7: 3}) + record((9,), {1: 1, 2: 4})
    assert read_counts(path, N_VOCAB) == counts
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]  # no temporary file left


def test_a_repeated_ngram_adds_up(tmp_path):
    path = tmp_path / "cache.bin"
    path.write_bytes(record((5, 6), {7: 3}) + record((5, 6), {7: 2, 8: 1}))
    assert read_counts(path, N_VOCAB) == {(5, 6): {7: 5, 8: 1}}


@pytest.mark.parametrize("data, words", [
    (record((5, 6), {7: 3})[:-4], "cut short"),  # the last count missing
    (record((5, 6), {7: 3}) + b"\x01\x00", "whole number"),
    (struct.pack("<4ii", 5, 6, NULL, NULL, 0), "claims 0 tokens"),
    (record((5, 6), {7: 0}), "counted 0 times"),
    (record((5, 6), {N_VOCAB: 1}), f"this model has {N_VOCAB} tokens"),
    (record((5, N_VOCAB + 3), {7: 1}), "not a lookup cache for this model"),
    (struct.pack("<4ii", 5, NULL, 7, NULL, 1) + struct.pack("<ii", 8, 1), "not a lookup cache"),  # a gap
    (struct.pack("<4ii", NULL, NULL, NULL, NULL, 1) + struct.pack("<ii", 8, 1), "not a lookup cache"),
    (struct.pack("<4i", 5, 6, NULL, NULL), "cut short"),  # no follower count
])
def test_a_file_that_is_not_a_lookup_cache_for_this_model_is_refused(tmp_path, data, words):
    path = tmp_path / "bad.bin"
    path.write_bytes(data)
    with pytest.raises(LookupCacheError, match=words):
        read_counts(path, N_VOCAB)


def test_a_missing_static_file_is_refused_with_its_name(tmp_path):
    with pytest.raises(LookupCacheError, match="missing.bin"):
        LookupCaches.load(str(tmp_path / "missing.bin"), None, N_VOCAB)


def static(counts: dict) -> StaticCounts:
    return StaticCounts.from_counts(counts)


def test_the_static_counts_draft_the_usual_follower_of_the_last_two_tokens():
    caches = LookupCaches(static({(1, 2): {3: 3, 9: 1}, (2, 3): {4: 2}, (3, 4): {5: 1}}), None, None)
    proposal = caches.draft([7, 1, 2], limit=8)
    # (3, 4) was seen once: fewer than the two samples a static draft needs
    assert proposal.tokens == [3, 4] and proposal.kind == LOOKUP_CACHE


def test_the_static_counts_draft_nothing_below_half_the_cases():
    caches = LookupCaches(static({(1, 2): {3: 1, 4: 1, 5: 1}}), None, None)
    assert caches.draft([1, 2], limit=8).tokens == []


def test_only_2_grams_of_a_static_file_are_held():
    counts = static({(1,): {2: 5}, (1, 2): {3: 5}, (1, 2, 3): {4: 5}})
    assert len(counts) == 1 and counts.find(1, 2) == 0 and counts.find(2, 3) == -1


def test_a_draft_stops_at_the_limit_and_needs_min_draft():
    caches = LookupCaches(static({(1, 1): {1: 9}}), None, None)
    assert caches.draft([1, 1], limit=3).tokens == [1, 1, 1]
    assert caches.draft([1, 1], limit=1, min_draft=2).tokens == []
    assert caches.draft([1], limit=4).tokens == []  # shorter than a 2-gram


def test_the_dynamic_counts_draft_from_the_longest_ngram_that_passes_strict_thresholds():
    dynamic = {
        (4, 5, 6, 7): {8: 1},  # a 4-gram seen once: strict needs two samples
        (5, 6, 7): {9: 2},  # a 3-gram seen twice, always by 9: drafted
        (7,): {10: 40},
    }
    caches = LookupCaches(None, dynamic, None)
    assert caches.draft([4, 5, 6, 7], limit=1).tokens == [9]
    # a 1-gram needs four samples and three quarters of them
    caches = LookupCaches(None, {(7,): {10: 2, 11: 1}}, None)
    assert caches.draft([6, 7], limit=1).tokens == []
    caches = LookupCaches(None, {(7,): {10: 3, 11: 1}}, None)
    assert caches.draft([6, 7], limit=1).tokens == [10]


def test_the_static_counts_weigh_the_dynamic_candidates():
    # the dynamic 2-gram (6, 7) saw 8 twice and 9 once; the corpus saw only 9 after (6, 7),
    # so 9 is the pick, and one case in three is too few: the 1-gram (7,) drafts instead
    dynamic = {(6, 7): {8: 2, 9: 1}, (7,): {9: 4}}
    caches = LookupCaches(static({(6, 7): {9: 1}}), dynamic, None)
    assert caches.draft([6, 7], limit=1).tokens == [9]
    # without the dynamic counts, the static 2-gram alone (one sample) drafts nothing
    assert caches.draft([6, 7], limit=1, dynamic=False).tokens == []


def test_an_output_is_counted_from_its_first_token_with_the_context_before_it():
    caches = LookupCaches(None, {}, None)
    caches.add([1, 2, 3, 4, 5], new=2)  # 1, 2, 3 came before the output 4, 5
    assert caches.dynamic == {
        (3,): {4: 1}, (4,): {5: 1}, (2, 3): {4: 1}, (3, 4): {5: 1}, (1, 2, 3): {4: 1}, (2, 3, 4): {5: 1},
        (1, 2, 3, 4): {5: 1}}
    assert caches.changed_at is not None
    caches.add([3, 4, 5], new=1)
    assert caches.dynamic[(4,)] == {5: 2}


def test_the_dynamic_counts_stop_taking_ngrams_at_their_bound_but_go_on_counting():
    caches = LookupCaches(None, {(1,): {2: 1}}, None, max_ngrams=2)
    caches.add([1, 2, 3], new=2)  # (1,)->2 counted again; one new n-gram fits: (2,)->3
    assert caches.dynamic == {(1,): {2: 2}, (2,): {3: 1}}


def test_without_a_dynamic_cache_nothing_is_counted():
    caches = LookupCaches(static({(1, 2): {3: 2}}), None, None)
    caches.add([1, 2, 3], new=1)
    assert caches.dynamic is None and caches.changed_at is None


def test_the_dynamic_counts_are_written_once_changed_and_due(tmp_path):
    path = tmp_path / "dynamic.bin"
    caches = LookupCaches.load(None, str(path), N_VOCAB)  # a missing dynamic file starts empty
    assert caches.dynamic == {} and not path.exists()
    caches.save()  # nothing changed: nothing written
    assert not path.exists()
    caches.add([1, 2, 3, 4, 5, 6], new=3)
    changed = caches.changed_at
    assert not caches.save_due(changed + 1) and caches.save_due(changed + 3600)
    caches.save()
    assert caches.changed_at is None
    again = LookupCaches.load(None, str(path), N_VOCAB)
    assert again.dynamic == caches.dynamic and again.dynamic[(3, 4, 5)] == {6: 1}


def test_a_failed_write_keeps_the_counts_for_the_next_one(tmp_path, caplog):
    caches = LookupCaches(None, {}, tmp_path / "gone" / "dynamic.bin")
    caches.add([1, 2, 3], new=1)
    caches.save()
    assert caches.changed_at is not None and "could not write the dynamic lookup cache" in caplog.text


def test_a_static_file_is_read_into_the_same_counts_as_a_dict_gives(tmp_path):
    path = tmp_path / "static.bin"
    # a repeated 2-gram adds up; the 1- and 3-grams are never looked up, so not kept
    path.write_bytes(record((1, 2), {3: 2, 9: 5}) + record((4,), {5: 9}) + record((1, 2), {3: 3})
                     + record((1, 2, 3), {4: 9}) + record((7, 8), {6: 2, 5: 2}))
    from_file = LookupCaches.load(str(path), None, N_VOCAB).static
    from_dict = static({(1, 2): {3: 5, 9: 5}, (7, 8): {5: 2, 6: 2}})
    for counts in (from_file, from_dict):
        assert len(counts) == 2 and counts.find(4, 5) == -1 and counts.find(1, 3) == -1
        assert counts.followers(counts.find(1, 2)) == {3: 5, 9: 5}
        assert counts.draft(counts.find(1, 2)) == 3 and counts.draft(counts.find(7, 8)) == 5  # ties: the lowest
    assert static({}).find(1, 2) == -1 and len(static({})) == 0


def test_many_records_read_whole(tmp_path):
    path = tmp_path / "big.bin"
    counts = {(a, b): {(a + b) % N_VOCAB: 1 + a % 3, 7: 1} for a in range(300) for b in range(0, 600, 3)}
    write_counts(path, counts)
    loaded = LookupCaches.load(str(path), None, N_VOCAB).static
    assert len(loaded) == len(counts) == 60_000
    assert loaded.followers(loaded.find(299, 597)) == counts[(299, 597)]


def test_a_dynamic_file_is_read_up_to_its_bound(tmp_path):
    path = tmp_path / "dynamic.bin"
    write_counts(path, {(1,): {2: 1}, (2,): {3: 1}, (3,): {4: 1}})
    assert read_counts(path, N_VOCAB, max_ngrams=2) == {(1,): {2: 1}, (2,): {3: 1}}


def test_a_draft_from_the_caches_holds_at_most_max_draft_tokens():
    from mlxcel.engine.lookup_cache import MAX_DRAFT

    caches = LookupCaches(static({(1, 1): {1: 9}}), None, None)
    assert caches.draft([1, 1], limit=100).tokens == [1] * MAX_DRAFT


def test_a_count_past_int32_is_written_as_the_largest_the_file_holds(tmp_path):
    path = tmp_path / "dynamic.bin"
    write_counts(path, {(1,): {2: 1 << 40}})
    assert read_counts(path, N_VOCAB) == {(1,): {2: (1 << 31) - 1}}
