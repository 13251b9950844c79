"""The busy front end's spread: fitted to the busy-start bounds as a lognormal, and drawn per
request by the simulator (docs/simulator.md, "The busy front end's spread")."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from agentload.calibration.calibrate import ServerInfo, build_profile, spread_without
from agentload.calibration.fit import PARAMS, Fit, fit_busy_lognormal, fit_busy_overhead
from agentload.calibration.probe import ProbeResult
from agentload.sim.coalesce import van_der_corput
from agentload.sim.plan import request_overhead
from agentload.sim.profiles import BUILTIN_PROFILES, Profile


def _bounds(
    median: float, sigma: float, n: int, width: float = 0.003, seed: int = 1
) -> list[tuple[float, float, int]]:
    """Front ends drawn from a lognormal, each known only to lie in a span `width` long that
    holds it at a random place (where in a step it ended), as the busy-start pattern reads."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        x = median * math.exp(sigma * rng.gauss(0.0, 1.0))
        u = rng.random()
        out.append((x - u * width, x + (1 - u) * width, 64))
    return out


def test_the_spread_of_lognormal_front_ends_is_recovered_from_their_bounds() -> None:
    for sigma in (0.2, 0.3, 0.5):
        for seed in (1, 2, 3):
            got = fit_busy_lognormal(_bounds(0.005, sigma, 400, seed=seed), 0.0)
            assert got.sigma == pytest.approx(sigma, abs=0.05), (sigma, seed)
            assert got.median == pytest.approx(0.005, rel=0.06), (sigma, seed)
    # the per-token part is taken off first
    bounds = _bounds(0.005, 0.3, 400)
    plain, per_token = fit_busy_lognormal(bounds, 0.0), fit_busy_lognormal(bounds, 1e-6)
    assert per_token.mode == pytest.approx(plain.mode - 64e-6)
    assert per_token.median < plain.median


def test_bounds_that_all_hold_one_value_fit_no_spread() -> None:
    bounds = [(0.02 - f * 0.004, 0.02 + (1 - f) * 0.004, 64) for f in (0.1, 0.4, 0.6, 0.95)]
    got = fit_busy_lognormal(bounds, 0.0)
    assert got.sigma == 0.0
    assert got.median == got.mode == fit_busy_overhead(bounds, 0.0)
    assert got.median == pytest.approx(0.02, abs=0.0004)
    assert fit_busy_lognormal([], 0.0).sigma == 0.0  # nothing measured


def test_an_arrival_a_load_spike_moved_does_not_widen_the_spread() -> None:
    bounds = _bounds(0.005, 0.3, 200)
    base = fit_busy_lognormal(bounds, 0.0)
    spiked = fit_busy_lognormal([*bounds, (0.060, 0.063, 64)], 0.0)  # 12 times the median
    assert spiked.sigma == pytest.approx(base.sigma, abs=0.02)
    assert spiked.median == pytest.approx(base.median, rel=0.02)


def test_the_simulator_draws_each_front_end_from_the_lognormal() -> None:
    p = Profile(request_overhead_s=0.004, request_overhead_sigma=0.3)
    draws = [request_overhead(p, n) for n in range(3**5)]
    logs = [math.log(x / 0.004) for x in draws]
    # 3^5 consecutive requests cover the distribution evenly: its median and sigma
    assert statistics.median(draws) == pytest.approx(0.004, rel=0.01)
    assert statistics.pstdev(logs) == pytest.approx(0.3, rel=0.03)
    assert draws == [request_overhead(p, n) for n in range(3**5)]  # reproducible
    assert len(set(draws)) == len(draws)
    # no spread: every request the same
    flat = Profile(request_overhead_s=0.004)
    assert {request_overhead(flat, n) for n in range(50)} == {0.004}


def test_the_front_end_draw_is_independent_of_the_first_token_hold() -> None:
    # the hold is drawn from the base-2 sequence on the same request counter
    n = 3**5
    two = [van_der_corput(k + 1) for k in range(n)]
    three = [van_der_corput(k + 1, 3) for k in range(n)]
    assert abs(statistics.correlation(two, three)) < 0.1
    # and either one alone fills every interval of its base evenly
    assert sorted(int(9 * x + 1e-9) for x in three[:9]) == list(range(9))
    assert sorted(int(8 * x) for x in two[:8]) == list(range(8))


def test_the_simulators_own_overhead_comes_off_the_median_but_keeps_the_spread() -> None:
    median, sigma, over = 0.005, 0.3, 0.001
    wider = spread_without(median, sigma, over)
    assert wider > sigma
    # the simulator's whole front end (its overhead and the drawn part) keeps the fitted
    # median and the value one sigma above it
    assert over + (median - over) * math.exp(wider) == pytest.approx(
        median * math.exp(sigma), rel=2e-3
    )
    assert spread_without(median, 0.0, over) == 0.0
    assert spread_without(0.0005, sigma, over) == sigma  # nothing left to spread


def test_a_calibrated_profile_carries_the_median_and_the_spread() -> None:
    bounds = _bounds(0.005, 0.3, 300)
    params = dict.fromkeys(PARAMS, 0.0)
    params.update(request_overhead_s=0.009, step_overhead_s=0.002)
    info = ServerInfo("vllm", "0.32.0", "m", None, None, None, is_sim=False)
    base = BUILTIN_PROFILES["tiny-cpu"].model_copy(update={"request_overhead_sigma": 0.7})
    p = build_profile("p", base, Fit(params, []), ProbeResult(busy=bounds), info, {})
    note = (p.calibration or {})["busy_start"]
    assert note["sigma"] == p.request_overhead_sigma == pytest.approx(0.3, abs=0.05)
    assert p.request_overhead_s == pytest.approx(note["request_overhead_busy_s"], rel=1e-3)
    assert p.request_overhead_s == pytest.approx(0.005, rel=0.06)
    assert 0 < note["consistent"] < note["arrivals"] == 300
    # the idle front end is still the fitted one: the median's difference from it is the wake
    assert p.request_overhead_s + p.idle_wake_s == pytest.approx(0.009, rel=1e-3)
    # without the pattern nothing is spread (the base profile's spread is not carried over)
    q = build_profile("q", base, Fit(params, []), ProbeResult(), info, {})
    assert q.request_overhead_sigma == 0.0
