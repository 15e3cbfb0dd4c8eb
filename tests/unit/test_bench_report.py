"""bench/report.py: the confidence interval given for each median ratio, and the verdict
it decides (a target inside the interval is marked as within the host's noise)."""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import pytest

BENCH = str(Path(__file__).resolve().parents[2] / "bench")
sys.path.insert(0, BENCH)  # the bench's scripts import each other by their plain names
try:
    from report import Round, median_interval, summarize
    from scenarios import Measurement
finally:
    sys.path.remove(BENCH)


@pytest.mark.parametrize("n, ranks, coverage", [(5, (1, 5), 0.9375), (10, (2, 9), 0.978515625),
                                                 (15, (4, 12), 0.96484375), (20, (6, 15), 0.958610534)])
def test_the_interval_is_the_order_statistics_that_keep_95_percent(n, ranks, coverage):
    values = [float(v) for v in range(n, 0, -1)]  # any order: the interval sorts
    low, high, covered = median_interval(values)
    assert (low, high) == ranks
    assert covered == pytest.approx(coverage, abs=1e-9)


def test_it_covers_a_skewed_distributions_median_as_often_as_it_says():
    rng = random.Random(7)
    median = math.log(2)  # of the exponential distribution with rate 1
    trials, hits = 20_000, 0
    for _ in range(trials):
        low, high, coverage = median_interval([rng.expovariate(1.0) for _ in range(15)])
        hits += low <= median <= high
    assert abs(hits / trials - coverage) < 0.006  # 0.9648 said; four standard errors either way


def test_nan_rounds_are_left_out_and_nothing_gives_nan():
    assert median_interval([1.0, math.nan, 3.0, 2.0, 5.0, 4.0])[:2] == (1.0, 5.0)
    assert all(math.isnan(x) for x in median_interval([math.nan]))


def _rounds(ratios: list[float]) -> list[Round]:
    return [Round("aggregate4", i, Measurement({"aggregate_tps": 100 * r}), Measurement({"aggregate_tps": 100.0}))
            for i, r in enumerate(ratios)]


def test_a_target_inside_the_interval_is_marked_as_noise_and_one_outside_is_not():
    # fifteen rounds, two of them below 1.0: the interval (x4..x12) lies above, so a pass
    clear = summarize(_rounds([0.97, 0.99] + [1.02 + 0.01 * i for i in range(13)]))[0]
    assert clear.verdict == "ok" and clear.spread[0] < 1.0 < clear.interval[0]
    # five rounds on both sides of 1.0: the median alone says pass, the interval cannot tell
    unsure = summarize(_rounds([0.96, 0.98, 1.01, 1.03, 1.05]))[0]
    assert unsure.verdict == "ok ~"
    below = summarize(_rounds([0.90 + 0.005 * i for i in range(15)]))[0]
    assert below.verdict == "MISS"
