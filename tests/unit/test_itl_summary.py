"""The per-call ITL summary and histogram against numpy on the same gaps."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from agentload.client import itlhist
from agentload.client.client import _itl


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10**10), max_size=150))
def test_summary_and_histogram_match_numpy(times: list[int]) -> None:
    times.sort()
    summary, gaps, ordered = _itl(times)
    expect = np.diff(np.asarray(times, dtype=np.int64)) / 1e9
    assert gaps == expect.tolist() and ordered == sorted(gaps)
    assert summary.count == len(gaps)
    if not gaps:
        assert summary.p50 is None
        return
    p50, p90, p99 = np.percentile(expect, [50, 90, 99])
    assert abs(summary.p50 - p50) < 1e-12  # type: ignore[operator]
    assert abs(summary.p90 - p90) < 1e-12 and abs(summary.p99 - p99) < 1e-12  # type: ignore[operator]
    assert summary.max == expect.max() and abs(summary.mean - expect.mean()) < 1e-12  # type: ignore[operator]
    assert itlhist.encode_sorted(ordered) == itlhist.encode(gaps)
