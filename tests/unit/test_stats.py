"""Statistics helpers against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentload import stats


def test_describe_linear_interpolation() -> None:
    d = stats.describe([1, 2, 3, 4, None, 5])
    assert d["count"] == 5
    assert d["p50"] == 3.0
    assert d["p90"] == pytest.approx(4.6)  # 1 + 0.9 * 4 -> between 4 and 5
    assert d["p99.9"] == pytest.approx(4.996)
    assert d["mean"] == 3.0 and d["min"] == 1.0 and d["max"] == 5.0
    assert d["std"] == pytest.approx(math.sqrt(2.5))


def test_describe_empty() -> None:
    d = stats.describe([])
    assert d["count"] == 0 and d["p50"] is None and d["mean"] is None


def test_slo_attainment_counts_missing_as_miss() -> None:
    assert stats.slo_attainment([0.5, 1.0, 2.5, None], 1.0) == 0.5
    rows = [{"ttft": 0.1, "e2e": 1}, {"ttft": 0.1, "e2e": 9}, {"ttft": None, "e2e": 1}]
    assert stats.slo_attainment_all(rows, {"ttft": 0.5, "e2e": 5}) == pytest.approx(1 / 3)


def test_throughput_window() -> None:
    assert stats.throughput([0, 1, 2, 3, 4]) == pytest.approx(5 / 4)
    assert stats.throughput([0, 1, 2, 3, 4], [10] * 5, window=(0, 10)) == pytest.approx(5.0)


def test_bootstrap_ci_contains_mean() -> None:
    rng = np.random.default_rng(1)
    vals = list(rng.normal(10, 2, size=400))
    lo, hi = stats.bootstrap_ci(vals, seed=3)
    assert lo < float(np.mean(vals)) < hi
    assert hi - lo == pytest.approx(2 * 1.96 * 2 / math.sqrt(400), rel=0.25)
    assert stats.bootstrap_ci([1.0]) is None


def test_pass_hat_k_hand_computed() -> None:
    # task a: 2 of 3 succeed; task b: 3 of 3; task c: 0 of 3.
    res = stats.pass_hat_k({"a": [1, 1, 0], "b": [1, 1, 1], "c": [0, 0, 0]})
    assert res[1] == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert res[2] == pytest.approx((1 / 3 + 1 + 0) / 3)
    assert res[3] == pytest.approx((0 + 1 + 0) / 3)
