"""The draft-length policy: measured batch costs, per-position acceptance, and the
length that maximises expected tokens per second."""

import pytest

from mlxcel.engine.draft_policy import AcceptanceStats, DecodeCosts, best_draft_length

# shaped like llama.cpp on 2 CPU cores: two tokens cost twice one, tiles of 4 and 8 are cheap
CPU = {1: 0.016, 2: 0.036, 3: 0.047, 4: 0.049, 5: 0.069, 6: 0.071, 7: 0.079, 8: 0.066, 9: 0.083,
       10: 0.086, 11: 0.092, 12: 0.079, 13: 0.095, 14: 0.102, 15: 0.105, 16: 0.082, 20: 0.108, 24: 0.126}
FLAT = {n: 0.010 + 0.0001 * n for n in range(1, 17)}  # an accelerator: extra tokens nearly free


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
    costs.observe([4, 99], 1.0)
    costs.observe([], 1.0)
    assert costs.scale == pytest.approx(2.0, rel=0.01)


def test_a_split_batch_is_observed_against_the_sum_of_its_micro_batches():
    costs = DecodeCosts(CPU)
    for _ in range(100):
        costs.observe([4, 8], 0.049 + 0.066)  # as the curve says: the scale stays
    assert costs.scale == pytest.approx(1.0)
    for _ in range(100):
        costs.observe([4, 8], 1.5 * (0.049 + 0.066))
    assert costs.scale == pytest.approx(1.5, rel=0.01)


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
    assert best_draft_length(DecodeCosts(CPU), stats.expected_accepted(16), 1, 1.0, 2) == 0


def test_long_tile_aligned_drafts_when_copies_hold():
    stats = AcceptanceStats(24)
    for _ in range(8):
        stats.observe(15, 15)
    k = best_draft_length(DecodeCosts(CPU), stats.expected_accepted(23), 1, 1.0, 2)
    assert 1 + k in (16, 20, 24)  # batch sizes on the fast tiles


def test_a_sure_draft_is_cut_where_the_batch_lands_on_a_fast_tile():
    expected = [float(j) for j in range(9)]  # eight sure drafts available, no more
    k = best_draft_length(DecodeCosts(CPU), expected, 1, 1.0, 2)
    assert k == 7  # a batch of 8 (8 tokens in 66 ms) beats one of 9 (9 in 83 ms)


def test_accelerator_drafts_even_with_modest_acceptance():
    stats = AcceptanceStats(16)
    for _ in range(8):
        stats.observe(8, 2)
    assert best_draft_length(DecodeCosts(FLAT), stats.expected_accepted(15), 1, 1.0, 2) >= 2


def test_draft_model_cost_per_token_counts_against_long_drafts():
    expected = [float(j) for j in range(16)]  # every draft accepted
    free = best_draft_length(DecodeCosts(FLAT), expected, 1, 1.0, 2, seconds_per_draft=0.0)
    dear = best_draft_length(DecodeCosts(FLAT), expected, 1, 1.0, 2, seconds_per_draft=0.02)
    assert free == 15 and dear == 0  # drafting a token dearer than decoding it never pays


def test_a_draft_near_break_even_is_not_made():
    expected = [0.0, 0.05, 0.08]  # two drafts would gain about 6% on a flat curve
    assert best_draft_length(DecodeCosts(FLAT), expected, 1, 1.0, 2, margin=0.0) == 2
    assert best_draft_length(DecodeCosts(FLAT), expected, 1, 1.0, 2) == 0


def test_an_assumed_cpu_curve_drafts_on_the_prior_and_stops_when_drafts_fail():
    """A start whose cores were busy measures no curve. Without one every proposal was
    drafted whole, 0 of 260 accepted in one answer; the assumed curve drafts a little on
    the prior, long where copies hold, and not at all once drafts keep failing."""
    costs = DecodeCosts.assumed(24)
    assert costs.sizes == DecodeCosts.sizes_to_measure(24)
    fresh = best_draft_length(costs, AcceptanceStats(16).expected_accepted(16), 1, 1.0, 2)
    assert 2 <= fresh <= 6
    failing = AcceptanceStats(16)
    for _ in range(8):
        failing.observe(8, 0)
    assert best_draft_length(costs, failing.expected_accepted(16), 1, 1.0, 2) == 0
    sure = [float(j) for j in range(17)]
    assert best_draft_length(costs, sure, 1, 1.0, 2) == 15  # a batch of 16: past it, sizes go by fours


def test_an_assumed_curve_is_rescaled_to_the_decodes_it_sees_and_a_gpu_s_is_flatter():
    costs = DecodeCosts.assumed(8)
    for _ in range(100):
        costs.observe([1], 0.025)
    assert costs.cost(1) == pytest.approx(0.025, rel=0.01)
    assert costs.cost(2) / costs.cost(1) == pytest.approx(1.6)
    gpu = DecodeCosts.assumed(8, "gpu")
    assert gpu.cost(8) / gpu.cost(1) == pytest.approx(1.7)
    breaking = AcceptanceStats(16)
    for _ in range(8):
        breaking.observe(8, 2)  # every draft breaks at its third token
    on_cpu = best_draft_length(costs, breaking.expected_accepted(8), 1, 1.0, 2)
    assert best_draft_length(gpu, breaking.expected_accepted(8), 1, 1.0, 2) > on_cpu == 2
