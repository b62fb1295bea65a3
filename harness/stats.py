"""Statistics of timing samples: the one place where medians, spreads and their intervals come from,
and the ratios built from them (speedup intervals, geometric means).

Kernel times are skewed (clock ramps, the odd preempted launch), so ssdbench summarises with the
median and a distribution-free confidence interval of the median: two order statistics whose ranks
come from the Binomial(n, 1/2) law of how many samples fall below the true median. No normality is
assumed, and the interval is exact for any continuous distribution.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

CI_LEVEL = 0.95
# Binomial terms further than this many standard deviations below n/2 are < 1e-40 and skipped.
_TAIL_SIGMAS = 20
#: A positive quantity or an array/Series of them (anything that divides element-wise).
_Q = TypeVar("_Q")


@dataclass(frozen=True)
class Summary:
    """Median, 10th/90th percentiles and the CI_LEVEL interval of the median of n samples.

    ci_low/ci_high are NaN when n is too small for any interval to reach the level (n < 6 at 95 %).
    """

    n: int
    median: float
    p10: float
    p90: float
    ci_low: float
    ci_high: float

    @property
    def ci_rel(self) -> float:
        """Half-width of the interval relative to the median (NaN without an interval)."""
        return (self.ci_high - self.ci_low) / 2 / self.median if self.median else math.nan


@functools.cache
def median_ci_ranks(n: int, level: float = CI_LEVEL) -> tuple[int, int] | None:
    """1-based ranks (j, n + 1 - j) of the narrowest symmetric order-statistic interval of the
    median with coverage >= level, or None when even (min, max) falls short.

    Coverage of [x_(j), x_(n+1-j)] is P(j <= K <= n - j) = 1 - 2 P(K <= j - 1), K ~ Bin(n, 1/2).
    """
    alpha = 1.0 - level
    log_norm = math.lgamma(n + 1) + n * math.log(0.5)
    start = max(0, math.floor(n / 2 - _TAIL_SIGMAS * math.sqrt(n) / 2))
    best = start if start > 0 else None  # P(K < start) is negligible, so rank `start` qualifies
    cdf = 0.0
    for i in range(start, n // 2 + 1):
        cdf += math.exp(log_norm - math.lgamma(i + 1) - math.lgamma(n - i + 1))
        if 2 * cdf > alpha:
            break
        best = i + 1
    return None if best is None else (best, n + 1 - best)


#: The fewest samples that have a CI_LEVEL interval of the median (6 at 95 %: (min, max) of six
#: samples holds the median with probability 1 − 2/64 = 96.9 %).
MIN_CI_SAMPLES = next(n for n in range(1, 1000) if median_ci_ranks(n))


def summarize(samples: Sequence[float], level: float = CI_LEVEL) -> Summary:
    """Summary of one provider's timed samples (at least one)."""
    ordered = np.sort(np.asarray(samples, dtype=float))
    if ordered.size == 0:
        raise ValueError("summarize needs at least one sample")
    ranks = median_ci_ranks(len(ordered), level)
    low, high = (ordered[ranks[0] - 1], ordered[ranks[1] - 1]) if ranks else (math.nan, math.nan)
    p10, p50, p90 = np.percentile(ordered, [10, 50, 90])
    return Summary(len(ordered), float(p50), float(p10), float(p90), float(low), float(high))


def median(samples: Sequence[float]) -> float:
    """Median of at least one sample (the mean of the two middle ones for an even count)."""
    values = np.asarray(samples, dtype=float)
    if values.size == 0:
        raise ValueError("median needs at least one sample")
    return float(np.median(values))


def ratio_interval(num_low: _Q, num_high: _Q, den_low: _Q, den_high: _Q) -> tuple[_Q, _Q]:
    """Interval of num/den from intervals of two positive quantities (extreme-end combination):
    it holds the true ratio whenever both intervals hold theirs, so it errs wide."""
    return num_low / den_high, num_high / den_low


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive ratios (the mean that treats 2x and 0.5x symmetrically); NaN
    values are ignored, and NaN is returned when none is left."""
    finite = np.asarray(list(values), dtype=float)
    finite = finite[~np.isnan(finite)]
    return float(np.exp(np.log(finite).mean())) if finite.size else math.nan


def converged(summary: Summary, ci_target: float) -> bool:
    """True when the median's interval exists and its relative half-width is within ci_target."""
    return summary.ci_rel <= ci_target  # NaN (no interval yet) compares False
