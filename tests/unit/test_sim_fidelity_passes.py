"""Combining fidelity passes: medians per metric, and the real server's spread between them."""

from __future__ import annotations

import pytest

from agentload.calibration.fidelity import (
    METRICS,
    combine,
    compare,
    off,
    ranges,
    unresolved,
)


def _pass(ttft: float, tpot: float) -> dict[str, dict[str, float]]:
    m = dict.fromkeys(METRICS, 1.0)
    m["ttft_p50_s"] = m["ttft_p90_s"] = ttft
    m["tpot_mean_s"] = tpot
    return {"w": m}


def test_combine_takes_medians_and_spread() -> None:
    median, spread = combine([_pass(0.10, 0.004), _pass(0.12, 0.005), _pass(0.11, 0.003)])
    assert median["w"]["ttft_p50_s"] == pytest.approx(0.11)
    assert median["w"]["tpot_mean_s"] == pytest.approx(0.004)
    assert spread["w"]["ttft_p50_s"] == pytest.approx(0.02 / 0.11)
    assert spread["w"]["tpot_mean_s"] == pytest.approx(0.5)
    assert spread["w"]["output_tok_s"] == 0.0


def test_unresolved_names_metrics_whose_real_moved_more_than_the_goal() -> None:
    real, spread = combine([_pass(0.10, 0.004), _pass(0.105, 0.006)])
    sim, _ = combine([_pass(0.10, 0.005), _pass(0.10, 0.005)])
    rows = compare(real, sim, spread)
    assert unresolved(rows) == ["w tpot_mean"]
    assert unresolved(compare(real, sim)) == []  # one pass: nothing to say


def test_verdicts_tell_the_profiles_error_from_the_servers_swings() -> None:
    real_passes = [_pass(0.100, 0.0030), _pass(0.130, 0.0031), _pass(0.120, 0.0032)]
    real, spread = combine(real_passes)  # TTFT median 0.120, TPOT median 0.0031
    # TTFT p50/p90 +8 %: within the goal; TPOT -19 %, below every real pass: off
    sim, _ = combine([_pass(0.130, 0.0025)])
    (row,) = compare(real, sim, spread, ranges(real_passes))
    assert row["real_range"]["ttft_p50_s"] == [0.100, 0.130]
    assert row["verdict"] == {"ttft_p50_s": "goal", "ttft_p90_s": "goal", "tpot_mean_s": "off"}
    assert off([row]) == ["w tpot_mean"]
    # TTFT -15 %: outside the goal but inside what the server did between passes
    sim, _ = combine([_pass(0.102, 0.0031)])
    (row,) = compare(real, sim, spread, ranges(real_passes))
    assert row["verdict"]["ttft_p50_s"] == "swings"
    assert off([row]) == []
    # one pass: no range, no verdict
    assert "verdict" not in compare(real, sim)[0] and off(compare(real, sim)) == []
