"""The draft-length policy: measured batch costs, per-position acceptance, and the
length that maximises expected tokens per second."""

import pytest

from mlxcel.engine.draft_policy import AcceptanceStats, DecodeCosts, PlannedBatch, best_draft_length, equal_split

# shaped like llama.cpp on 2 CPU cores: two tokens cost twice one, tiles of 4 and 8 are cheap
CPU = {1: 0.016, 2: 0.036, 3: 0.047, 4: 0.049, 5: 0.069, 6: 0.071, 7: 0.079, 8: 0.066, 9: 0.083,
       10: 0.086, 11: 0.092, 12: 0.079, 13: 0.095, 14: 0.102, 15: 0.105, 16: 0.082, 20: 0.108, 24: 0.126}
FLAT = {n: 0.010 + 0.0001 * n for n in range(1, 17)}  # an accelerator: extra tokens nearly free
# SmolLM2-135M Q4_1 on a 2-core Zen 3 guest (the start-up log's curve)
SMOL = {1: 0.0065, 2: 0.0135, 3: 0.0167, 4: 0.0207, 5: 0.0239, 6: 0.0293, 7: 0.0305, 8: 0.0297, 9: 0.0370,
        10: 0.0374, 11: 0.0429, 12: 0.0436, 13: 0.0438, 14: 0.0505, 15: 0.0492, 16: 0.0483}
ONE = PlannedBatch([0], split=False, n_ubatch=512)  # a single decoding sequence


def test_sizes_to_measure_are_dense_then_every_fourth():
    assert DecodeCosts.sizes_to_measure(6) == [1, 2, 3, 4, 5, 6]
    assert DecodeCosts.sizes_to_measure(30) == [*range(1, 17), 20, 24, 28, 30]


def test_cost_between_measured_sizes_is_the_dearer_neighbour_and_linear_past_the_last():
    costs = DecodeCosts(CPU)
    assert costs.cost(8) == pytest.approx(0.066)
    assert costs.cost(18) == pytest.approx(0.108)  # between 16 (0.082) and 20 (0.108)
    assert costs.cost(28) > costs.cost(24)


def test_observed_batches_rescale_every_size():
    costs = DecodeCosts(CPU)
    for _ in range(100):
        costs.observe([1], 0.032)  # the machine got twice as slow
    assert costs.scale == pytest.approx(2.0, rel=0.01)
    assert costs.cost(8) == pytest.approx(0.132, rel=0.01)
    costs.observe([3], -1.0)  # nonsense is ignored
    costs.observe([99], 1.0)
    assert costs.scale == pytest.approx(2.0, rel=0.01)


def test_rejects_a_curve_without_a_single_token_time():
    with pytest.raises(ValueError):
        DecodeCosts({2: 0.01})


def test_acceptance_starts_optimistic_and_learns_where_drafts_break():
    stats = AcceptanceStats(16)
    fresh = stats.expected_accepted(4)
    assert fresh[0] == 0 and 0 < fresh[1] < 1 and fresh[4] > 3 * 0.6
    for _ in range(6):
        stats.observe(8, 3)  # every draft breaks at its fourth token
    expected = stats.expected_accepted(8)
    assert expected[3] > 2.5
    assert expected[8] - expected[4] < 0.5  # little is expected past the break


def test_positions_never_reached_inherit_the_deepest_evidence():
    stats = AcceptanceStats(48)
    for _ in range(4):
        stats.observe(8, 8)
    expected = stats.expected_accepted(32)
    assert expected[32] > 20  # full hits at 8 suggest more than the prior's 0.9 ** j


def test_idle_steps_decay_bad_evidence_back_toward_the_prior():
    stats = AcceptanceStats(16)
    for _ in range(5):
        stats.observe(8, 0)
    bad = stats.expected_accepted(8)[8]
    for _ in range(40):
        stats.idle()
    assert stats.expected_accepted(8)[8] > bad + 2


def test_no_draft_when_acceptance_is_poor_on_a_cpu():
    stats = AcceptanceStats(16)
    for _ in range(8):
        stats.observe(8, 0)
    assert best_draft_length(DecodeCosts(CPU), stats.expected_accepted(16), ONE, 0, 1.0, 2) == 0


def test_long_tile_aligned_drafts_when_copies_hold():
    stats = AcceptanceStats(24)
    for _ in range(8):
        stats.observe(15, 15)
    k = best_draft_length(DecodeCosts(CPU), stats.expected_accepted(23), ONE, 0, 1.0, 2)
    assert 1 + k in (16, 20, 24)  # batch sizes on the fast tiles


def test_a_sure_draft_is_cut_where_the_batch_lands_on_a_fast_tile():
    expected = [float(j) for j in range(9)]  # eight sure drafts available, no more
    k = best_draft_length(DecodeCosts(CPU), expected, ONE, 0, 1.0, 2)
    assert k == 7  # a batch of 8 (8 tokens in 66 ms) beats one of 9 (9 in 83 ms)


def test_accelerator_drafts_even_with_modest_acceptance():
    stats = AcceptanceStats(16)
    for _ in range(8):
        stats.observe(8, 2)
    assert best_draft_length(DecodeCosts(FLAT), stats.expected_accepted(15), ONE, 0, 1.0, 2) >= 2


def test_draft_model_cost_per_token_counts_against_long_drafts():
    expected = [float(j) for j in range(16)]  # every draft accepted
    free = best_draft_length(DecodeCosts(FLAT), expected, ONE, 0, 1.0, 2, seconds_per_draft=0.0)
    dear = best_draft_length(DecodeCosts(FLAT), expected, ONE, 0, 1.0, 2, seconds_per_draft=0.02)
    assert free == 15 and dear == 0  # drafting a token dearer than decoding it never pays


def test_a_draft_near_break_even_is_not_made():
    expected = [0.0, 0.05, 0.08]  # two drafts would gain about 6% on a flat curve
    assert best_draft_length(DecodeCosts(FLAT), expected, ONE, 0, 1.0, 2, margin=0.0) == 2
    assert best_draft_length(DecodeCosts(FLAT), expected, ONE, 0, 1.0, 2) == 0


def test_an_equal_split_gives_a_sequences_drafts_a_micro_batch_of_their_own():
    assert equal_split([(0, 9), (1, 1), (2, 1), (3, 1)], 512) == [4, 8]
    assert equal_split([(0, 3), (1, 5)], 512) == [6, 2]
    assert equal_split([(0, 1), (1, 1), (2, 1), (3, 1)], 512) == [4]


def test_an_equal_split_runs_only_consecutive_sequence_ids_together():
    assert equal_split([(0, 1), (2, 1), (3, 1)], 512) == [1, 2]
    # one pass in batch order: 1, not 3 (it does not follow 1), then 2; 3 comes next time
    assert equal_split([(1, 1), (3, 1), (2, 1)], 512) == [2, 1]


def test_an_equal_split_keeps_each_micro_batch_within_n_ubatch():
    assert equal_split([(0, 600)], 512) == [512, 88]
    assert equal_split([(0, 300), (1, 300)], 512) == [512, 88]
    assert equal_split([(0, 0), (1, 2)], 512) == [2]


def test_a_planned_batch_costs_its_micro_batches():
    split = PlannedBatch([0, 1, 2, 3], split=True, n_ubatch=512)
    whole = PlannedBatch([0, 1, 2, 3], split=False, n_ubatch=512)
    assert split.ubatches(0, 8) == [4, 8] and whole.ubatches(0, 8) == [12]
    costs = DecodeCosts(SMOL)
    assert costs.batch_cost(split.ubatches(0, 8)) == pytest.approx(0.0207 + 0.0297)
    assert costs.batch_cost(split.ubatches()) == costs.batch_cost(whole.ubatches()) == pytest.approx(0.0207)


def test_drafts_that_pay_in_one_kv_stream_are_refused_where_they_run_as_a_micro_batch_of_their_own():
    expected = AcceptanceStats(16).expected_accepted(8)  # no evidence yet: the optimistic prior
    costs = DecodeCosts(SMOL)
    whole = PlannedBatch([0, 1, 2, 3], split=False, n_ubatch=512)
    split = PlannedBatch([0, 1, 2, 3], split=True, n_ubatch=512)
    assert best_draft_length(costs, expected, whole, 0, 4.0, 2) > 0
    assert best_draft_length(costs, expected, split, 0, 4.0, 2) == 0
    sure = [float(j) for j in range(9)]  # copied text: every draft holds
    assert best_draft_length(costs, sure, split, 0, 4.0, 2) == 8


def test_observed_micro_batches_rescale_against_their_sum():
    costs = DecodeCosts(SMOL)
    for _ in range(200):
        costs.observe([4, 8], 2 * (0.0207 + 0.0297))
    assert costs.scale == pytest.approx(2.0, rel=0.01)
    costs.observe([4, 99], 10.0)  # an unmeasured size: ignored
    costs.observe([], 1.0)
    assert costs.scale == pytest.approx(2.0, rel=0.01)


def test_a_planned_batch_splits_as_llama_cpp_for_every_draft_length_and_plan():
    import random

    rng = random.Random(7)
    for _ in range(1500):
        ids = sorted(rng.sample(range(8), rng.randint(1, 6)))
        batch = PlannedBatch(ids, split=True, n_ubatch=rng.choice([1, 3, 4, 16, 512]))
        for _ in range(rng.randint(0, 3)):  # drafts planned for earlier slots
            batch.add(rng.randrange(len(ids)), rng.randint(1, 20))
        index = rng.randrange(len(ids))
        for extra in range(0, 40, 3):
            tokens = list(batch.tokens)
            tokens[index] += extra
            assert batch.ubatches(index, extra) == equal_split(list(zip(ids, tokens)), batch.n_ubatch)


def test_a_planned_batch_prices_every_draft_length_as_its_micro_batches():
    import random

    rng = random.Random(11)
    costs = DecodeCosts(SMOL)
    costs.scale = 1.3
    for _ in range(300):
        ids = sorted(rng.sample(range(8), rng.randint(1, 6)))
        batch = PlannedBatch(ids, split=rng.random() < 0.8, n_ubatch=rng.choice([1, 4, 16, 512]))
        for _ in range(rng.randint(0, 3)):
            batch.add(rng.randrange(len(ids)), rng.randint(1, 20))
        index = rng.randrange(len(ids))
        price = batch.pricer(costs, index)
        for extra in range(0, 40, 3):
            assert price(extra) == pytest.approx(costs.batch_cost(batch.ubatches(index, extra)))
