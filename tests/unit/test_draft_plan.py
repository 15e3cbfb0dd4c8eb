"""Drafts of all slots sized together against llama.cpp's equal split of the batch."""

import itertools
import random

from mlxcel.engine.draft_plan import DraftOption, SplitBatch, equal_split, joint_draft_lengths
from mlxcel.engine.draft_policy import DecodeCosts, best_draft_length
from tests.unit.test_draft_policy import CPU


def split_by_token(spans: list[tuple[int, int]], n_ubatch: int) -> list[int]:
    """llama_batch_allocr::split_equal(sequential) walked token by token, as its C++
    does: the reference equal_split must agree with."""
    tokens = [seq for seq, n in spans for _ in range(n)]
    used = [False] * len(tokens)
    sizes = []
    while not all(used):
        chosen: list[int] = []
        for i, seq in enumerate(tokens):
            if not used[i] and seq not in chosen and (not chosen or seq == chosen[-1] + 1):
                chosen.append(seq)
        left = {seq: [i for i, s in enumerate(tokens) if s == seq and not used[i]] for seq in chosen}
        taken = 0
        while all(left[seq] for seq in chosen):
            for seq in chosen:
                used[left[seq].pop(0)] = True
            taken += 1
            if (taken + 1) * len(chosen) > n_ubatch:
                break
        sizes.append(taken * len(chosen))
    return sizes


def test_equal_split_takes_runs_of_consecutive_sequences_an_equal_share_each():
    assert equal_split([(0, 1), (1, 1), (2, 1), (3, 1)], 512) == [4]
    assert equal_split([(0, 1), (1, 1), (3, 1)], 512) == [2, 1]  # an idle slot between: two micro-batches
    assert equal_split([(0, 9), (1, 1), (2, 1), (3, 1)], 512) == [4, 8]  # one slot's drafts run alone
    assert equal_split([(0, 9), (1, 9), (2, 9), (3, 9)], 512) == [36]  # equal drafts ride together
    assert equal_split([(0, 9), (1, 1), (2, 9), (3, 9)], 512) == [4, 8, 16]
    assert equal_split([(0, 600)], 512) == [512, 88]
    assert equal_split([(0, 300), (1, 300)], 512) == [512, 88]


def test_equal_split_matches_the_token_by_token_walk_on_random_batches():
    rng = random.Random(7)
    for _ in range(400):
        seqs = sorted(rng.sample(range(8), rng.randint(1, 8)))
        spans = [(seq, rng.choice([1, 1, 2, 5, 9, 17, 40])) for seq in seqs]
        n_ubatch = rng.choice([8, 16, 64, 512])
        assert equal_split(spans, n_ubatch) == split_by_token(spans, n_ubatch), (spans, n_ubatch)


def survival(rate: float, k: int) -> list[float]:
    out = [0.0]
    for j in range(1, k + 1):
        out.append(out[-1] + rate**j)
    return out


def eager(costs: DecodeCosts, curves: list[list[float]], n: int) -> list[int]:
    """Each slot sized in turn as if the batch ran whole (the engine's first pass)."""
    planned, expected_yield, out = n, float(n), []
    for curve in curves:
        k = best_draft_length(costs, curve, planned, expected_yield, 2)
        out.append(k)
        planned, expected_yield = planned + k, expected_yield + curve[k]
    return out


def test_a_lone_draft_that_pays_only_if_the_batch_ran_whole_is_dropped():
    costs = DecodeCosts(CPU)
    curve = survival(0.85, 8)
    (k,) = eager(costs, [curve], 4)
    assert k == 8  # against 12 tokens of one sequence it pays
    batch = SplitBatch([0, 1, 2, 3], costs, 512)
    assert joint_draft_lengths(batch, [DraftOption(0, list(range(8)), curve, k)], 100, 2) == [0]
    sure = survival(0.99, 8)  # a copy that holds pays even as a micro-batch of its own
    assert joint_draft_lengths(batch, [DraftOption(0, list(range(8)), sure, 8)], 100, 2) == [8]


def test_slots_that_held_back_one_after_another_draft_together_at_one_length():
    costs = DecodeCosts(CPU)
    curves = [survival(0.95, 8) for _ in range(4)]
    chosen = eager(costs, curves, 4)
    assert chosen[-1] == 0  # each later slot saw a dearer batch and held back
    options = [DraftOption(i, list(range(8)), curve, k) for i, (curve, k) in enumerate(zip(curves, chosen))]
    lengths = joint_draft_lengths(SplitBatch([0, 1, 2, 3], costs, 512), options, 100, 2)
    assert lengths == [8, 8, 8, 8]


def test_the_joint_plan_is_the_best_of_every_plan_it_could_make_on_small_batches():
    """On small batches the candidates it prices include the optimum often enough:
    never worse than the slots' own plan, never below the batch without drafts."""
    costs = DecodeCosts(CPU)
    rng = random.Random(3)
    for _ in range(60):
        seqs = sorted(rng.sample(range(4), rng.randint(2, 4)))
        curves = [survival(rng.choice([0.5, 0.8, 0.9, 0.97]), rng.choice([2, 4, 8])) for _ in seqs]
        chosen = eager(costs, curves, len(seqs))
        options = [DraftOption(i, list(range(len(c) - 1)), c, k) for i, (c, k) in enumerate(zip(curves, chosen))]
        batch = SplitBatch(seqs, costs, 512)

        def rate(plan):
            return (len(seqs) + sum(c[k] for c, k in zip(curves, plan))) / batch.seconds(dict(enumerate(plan)))

        lengths = joint_draft_lengths(batch, options, 100, 2)
        assert rate(lengths) >= rate(chosen) or rate(chosen) < rate([0] * len(seqs)) * 1.1
        assert lengths == [0] * len(seqs) or rate(lengths) > rate([0] * len(seqs)) * 1.1
        best = max(itertools.product(*[[0, *range(2, len(c))] for c in curves]), key=rate)
        assert rate(lengths) <= rate(best) + 1e-9


def test_the_plan_stays_within_the_room_the_batch_has():
    costs = DecodeCosts(CPU)
    curves = [survival(0.99, 8) for _ in range(4)]
    options = [DraftOption(i, list(range(8)), c, 8 if i == 0 else 0) for i, c in enumerate(curves)]
    lengths = joint_draft_lengths(SplitBatch([0, 1, 2, 3], costs, 512), options, 4, 2)
    assert sum(lengths) <= 8 + 4


def test_a_proposal_shorter_than_the_least_draft_sits_out_a_common_length():
    costs = DecodeCosts(CPU)
    sure = survival(0.99, 8)
    options = [DraftOption(0, list(range(8)), sure, 8), DraftOption(1, [5], survival(0.99, 1), 0),
               DraftOption(2, list(range(8)), sure, 8), DraftOption(3, list(range(8)), sure, 0)]
    lengths = joint_draft_lengths(SplitBatch([0, 1, 2, 3], costs, 512), options, 100, 2)
    assert lengths[1] == 0 and lengths[0] == lengths[2] == lengths[3] > 0
