"""TTFT percentiles that lie between bands: how far one request crossing them moves them, and
the note the fidelity report gives when such a percentile is outside the goal."""

from __future__ import annotations

import pytest

from agentload.calibration.fidelity import (
    METRICS,
    band_edges,
    combine,
    compare,
    shift,
    summarise,
    table,
)
from agentload.calibration.stream import Call
from agentload.cli.sim_calibrate import _show_fidelity


def test_shift_is_small_in_a_crowd_and_large_in_a_gap() -> None:
    crowd = [0.100 + 0.001 * k for k in range(16)]
    assert shift(crowd, 0.5) == pytest.approx(0.001 / 0.1075)
    # four bands a prefill apart, four requests each: the median falls between two of them
    bands = sorted([0.14] * 4 + [0.27] * 4 + [0.39] * 4 + [0.53] * 4)
    at = (0.27 + 0.39) / 2
    assert shift(bands, 0.5) == pytest.approx((0.39 - at) / at)
    # one more request in the second band puts the median inside it: one request crossing
    # it moves it halfway to the next band
    more = sorted([0.14] * 4 + [0.27] * 5 + [0.39] * 3 + [0.53] * 4)
    assert shift(more, 0.5) == pytest.approx((0.33 - 0.27) / 0.27)
    # at the ends the move is the one way it can go
    assert shift([0.1, 0.2], 1.0) == pytest.approx(0.5)
    assert shift([0.1], 0.5) == 0.0 and shift([], 0.5) == 0.0


def _call(ttft: float) -> Call:
    return Call(start=10.0, times=[10.0 + ttft, 10.0 + ttft + 0.01], counts=[1, 2])


def test_summarise_reports_each_ttft_percentiles_shift() -> None:
    ttfts = [0.14] * 4 + [0.27] * 4 + [0.39] * 4 + [0.53] * 4
    m = summarise([_call(t) for t in reversed(ttfts)], 1.0)
    assert m["ttft_p50_s"] == pytest.approx(0.33)
    assert m["ttft_p50_shift"] == pytest.approx(shift(sorted(ttfts), 0.5))
    assert m["ttft_p90_shift"] == pytest.approx(shift(sorted(ttfts), 0.9))


def _side(p50: float, p50_shift: float) -> dict[str, dict[str, float]]:
    m = dict.fromkeys(METRICS, 1.0)
    m.update(ttft_p50_s=p50, ttft_p90_s=0.5, tpot_mean_s=0.01)
    m.update(ttft_p50_shift=p50_shift, ttft_p90_shift=0.01)
    return {"concurrent": m}


def test_a_goal_percentile_off_and_between_bands_is_named() -> None:
    # real: p50 inside a band; the simulator's between two, 27 % above it
    real, spread = combine([_side(0.26, 0.02), _side(0.27, 0.03), _side(0.25, 0.01)])
    sim, _ = combine([_side(0.33, 0.18), _side(0.33, 0.17)])
    assert real["concurrent"]["ttft_p50_shift"] == pytest.approx(0.02)
    assert sim["concurrent"]["ttft_p50_shift"] == pytest.approx(0.175)
    (row,) = compare(real, sim, spread)
    assert row["band_edge"] == ["ttft_p50_s"]
    assert row["shift"]["ttft_p50_s"] == {"real": pytest.approx(0.02), "sim": 0.175}
    assert band_edges([row]) == [
        {
            "workload": "concurrent",
            "metric": "ttft_p50_s",
            "real": pytest.approx(0.02),
            "sim": 0.175,
        }
    ]
    # within the goal, or off with both sides' percentiles in a crowd: nothing to say
    near, _ = combine([_side(0.28, 0.18)])
    assert compare(real, near)[0]["band_edge"] == []
    crowded, _ = combine([_side(0.33, 0.05)])
    assert compare(real, crowded)[0]["band_edge"] == []
    # sides summarised before shifts were reported: no shift, no note
    bare = {"concurrent": {m: v for m, v in real["concurrent"].items() if m in METRICS}}
    assert "band_edge" not in compare(bare, bare)[0]


def test_the_report_says_which_percentile_lies_between_bands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    real, _ = combine([_side(0.26, 0.02)])
    sim, _ = combine([_side(0.33, 0.18)])
    rows = compare(real, sim)
    result = {
        "rows": rows,
        "load_before": {"load_avg_1m": 0.5},
        "load_after": {"load_avg_1m": 0.6},
        "salt": 1,
        "within_goal": True,
        "band_edges": band_edges(rows),
    }
    _show_fidelity(result, None, False, table)
    said = capsys.readouterr().out
    assert (
        "note: concurrent TTFT p50 lies between bands of TTFTs (one request crossing it moves "
        "it by 2 % on the real server, 18 % on the simulator)"
    ) in said
