"""MLPerf-style early-stopping bounds of the replay summary."""

from __future__ import annotations

import math

from agentload.results.replay_summary import quantile_upper_bound


def _brute(values: list[float], q: float, confidence: float) -> float | None:
    v = sorted(values)
    n = len(v)
    cdf = 0.0
    for k in range(n):
        cdf += math.comb(n, k) * q**k * (1 - q) ** (n - k)
        if cdf >= confidence:
            return v[k]
    return None


def test_bound_matches_the_binomial_order_statistic() -> None:
    values = [float(x) for x in range(1, 201)]
    for q in (0.5, 0.9, 0.99):
        for c in (0.9, 0.99):
            assert quantile_upper_bound(values, q, c) == _brute(values, q, c)
    # the bound sits above the empirical percentile, and closes in as samples grow
    b200 = quantile_upper_bound(values, 0.9)
    assert b200 is not None and b200 > 180
    many = [float(x % 1000) for x in range(20_000)]
    b = quantile_upper_bound(many, 0.9)
    assert b is not None and 900 <= b <= 910


def test_too_few_samples_give_no_bound() -> None:
    assert quantile_upper_bound([1.0] * 100, 0.99) is None  # 0.99^100 > 1 % of no exceedance
    assert quantile_upper_bound([], 0.9) is None
    assert quantile_upper_bound([1.0, float("nan")], 0.5, 0.5) == 1.0
