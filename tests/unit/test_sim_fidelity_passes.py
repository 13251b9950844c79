"""Combining fidelity passes: medians per metric, and the real server's spread between them."""

from __future__ import annotations

import pytest

from agentload.sim.calibration.fidelity import METRICS, combine, compare, unresolved


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
