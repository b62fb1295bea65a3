"""harness.stats: percentiles, the order-statistic CI of the median, convergence, ratios."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from harness import stats
from harness.stats import converged, geomean, median, median_ci_ranks, ratio_interval, summarize


def _coverage(n: int, j: int) -> Fraction:
    """Exact coverage of [x_(j), x_(n+1-j)]: P(j <= K <= n - j), K ~ Bin(n, 1/2)."""
    return Fraction(sum(math.comb(n, k) for k in range(j, n - j + 1)), 2**n)


@pytest.mark.parametrize("n", [6, 7, 10, 17, 25, 50, 99, 200, 1000, 3001])
def test_ranks_are_the_narrowest_with_95_percent_coverage(n: int) -> None:
    j, k = median_ci_ranks(n)
    assert k == n + 1 - j
    assert _coverage(n, j) >= Fraction(95, 100)
    assert j == n // 2 + 1 or _coverage(n, j + 1) < Fraction(95, 100)


def test_too_few_samples_have_no_interval() -> None:
    assert median_ci_ranks(5) is None  # (min, max) covers only 1 - 2/32 = 93.75 %
    assert median_ci_ranks(1) is None
    assert median_ci_ranks(6) == (1, 6)
    assert stats.MIN_CI_SAMPLES == 6


def test_summarize_known_values() -> None:
    s = summarize([5.0, 1.0, 4.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 10.0])
    assert (s.n, s.median) == (10, 5.5)
    assert s.p10 == pytest.approx(1.9) and s.p90 == pytest.approx(9.1)
    assert (s.ci_low, s.ci_high) == (2.0, 9.0)  # ranks (2, 9) for n = 10
    assert s.ci_rel == pytest.approx(3.5 / 5.5)


def test_small_sample_summary_has_nan_interval_and_never_converges() -> None:
    s = summarize([1.0, 1.0, 1.0])
    assert math.isnan(s.ci_low) and math.isnan(s.ci_high) and math.isnan(s.ci_rel)
    assert not converged(s, 0.5)


def test_converged_compares_relative_half_width() -> None:
    s = summarize([100.0] * 10 + [101.0] * 10)
    assert s.ci_rel == pytest.approx(0.5 / 100.5)
    assert converged(s, 0.01) and not converged(s, 0.001)


def test_summarize_refuses_no_samples() -> None:
    with pytest.raises(ValueError):
        summarize([])


def test_interval_covers_the_true_median_of_a_skewed_law() -> None:
    """Distribution-free: on exponential samples (true median ln 2) coverage is >= 95 %."""
    rng = np.random.default_rng(1)
    trials, n = 2000, 21
    hits = 0
    for _ in range(trials):
        s = summarize(rng.exponential(size=n))
        hits += s.ci_low <= math.log(2) <= s.ci_high
    assert hits / trials >= 0.94  # exact coverage is 97.3 % at n = 21; 0.94 leaves sampling slack


def test_median() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5  # even count: mean of the middle two
    with pytest.raises(ValueError):
        median([])


def test_ratio_interval_joins_the_extreme_ends() -> None:
    assert ratio_interval(9.0, 11.0, 4.0, 5.0) == (9.0 / 5.0, 11.0 / 4.0)
    low, high = ratio_interval(*(pd.Series([v, 2 * v]) for v in (9.0, 11.0, 4.0, 5.0)))
    assert list(low) == [1.8, 1.8] and list(high) == [2.75, 2.75]


def test_geomean_is_symmetric_in_ratios_and_skips_nan() -> None:
    assert geomean(pd.Series([2.0, 0.5, math.nan])) == pytest.approx(1.0)
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert math.isnan(geomean(pd.Series([math.nan]))) and math.isnan(geomean([]))
