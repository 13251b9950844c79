"""A busy engine takes an arrival sooner than an idle one (`idle_wake_s`), the engine admits
arrivals in model time, and the probe's busy-start pattern reads the busy front end back."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import pytest

from agentload.calibration.calibrate import ServerInfo, _busy_note, build_profile
from agentload.calibration.fit import PARAMS, Fit, fit_busy_overhead
from agentload.calibration.probe import ProbeResult, busy_bounds
from agentload.calibration.stream import Call
from agentload.sim.engine import Engine, Seq
from agentload.sim.metrics import SimMetrics
from agentload.sim.profiles import BUILTIN_PROFILES, Profile
from null_output import NullOutput

STEP = 0.01


def _engine(**kw: Any) -> Engine:
    profile = Profile(step_overhead_s=STEP, block_size=16, kv_blocks=256, **kw)
    return Engine(profile, SimMetrics("m", block_size=16, kv_blocks=256, prefix_caching=True))


def _seq(rid: str, prompt: int, tokens: int) -> Seq:
    seq = Seq(rid, prompt, [], tokens, tokens, NullOutput(), ignore_eos=True)
    seq.model_times = []
    return seq


async def _until(cond: Any) -> None:
    async with asyncio.timeout(5.0):
        while not cond():  # noqa: ASYNC110 (the engine sets no event for a test to wait on)
            await asyncio.sleep(0.002)


async def test_only_the_first_step_after_idle_pays_idle_wake_s() -> None:
    engine = _engine(idle_wake_s=0.004)
    task = asyncio.ensure_future(engine.run())
    try:
        a = _seq("a", 32, 4)
        engine.add(a)
        await _until(lambda: a.finished)
    finally:
        engine.stop()
        await task
    gaps = [b - t for t, b in zip(a.model_times or [], (a.model_times or [])[1:], strict=False)]
    # the first token ends the step woken from idle: STEP + idle_wake_s after it came
    assert (a.model_times or [0])[0] - a.model_added == pytest.approx(STEP + 0.004, abs=1e-9)
    assert gaps == pytest.approx([STEP] * 3, abs=1e-9)


async def test_a_busy_engine_takes_an_arrival_at_the_first_step_after_its_front_end() -> None:
    # However late the host runs: the loop is held for 45 ms (past the request's front end
    # and several step ends), and the request still joins the step it made in model time.
    engine = _engine()
    task = asyncio.ensure_future(engine.run())
    try:
        a = _seq("a", 32, 60)
        engine.add(a)
        await _until(lambda: len(a.model_times or []) >= 3)
        firsts = []
        for k in range(4):
            b = _seq(f"b{k}", 16, 1)
            engine.submit(b, time.monotonic(), 0.013 + 0.002 * k)
            time.sleep(0.045)  # noqa: ASYNC251 (the point: a host that does not run the loop)
            await _until(lambda b=b: b.finished)  # type: ignore[misc]
            at = b.model_arrival + 0.013 + 0.002 * k
            assert b.model_added == pytest.approx(at, abs=1e-12)
            made = min(t for t in a.model_times or [] if t >= at - 1e-12)
            firsts.append(((b.model_times or [0])[0], made + STEP))
    finally:
        engine.stop()
        await task
    for got, want in firsts:
        assert got == pytest.approx(want, abs=1e-9)


async def _one_on_an_idle_engine(frontend_s: float, hold_s: float = 0.0) -> tuple[Seq, float]:
    """One request submitted to an idle engine (the loop then held `hold_s`, a late host):
    the finished request and when it was sent."""
    engine = _engine()
    task = asyncio.ensure_future(engine.run())
    try:
        b = _seq("b", 16, 1)
        sent = time.monotonic()
        engine.submit(b, sent, frontend_s)
        assert engine.frontend_requests == 1
        time.sleep(hold_s)  # noqa: ASYNC251 (a host that does not run the loop)
        await _until(lambda: b.finished)
    finally:
        engine.stop()
        await task
    assert engine.frontend_requests == 0
    return b, sent


async def test_an_idle_engine_wakes_when_the_front_end_is_over() -> None:
    b, sent = await _one_on_an_idle_engine(0.05)
    assert (b.model_times or [0])[0] - b.model_arrival == pytest.approx(0.05 + STEP, abs=1e-9)
    assert 0.05 + STEP <= time.monotonic() - sent < 0.05 + STEP + 0.5


async def test_a_late_wake_does_not_delay_the_first_token_on_the_wall_clock() -> None:
    # the loop is held 10 ms past the end of the front end: the woken step still ends STEP
    # after that end, not STEP after the engine got round to it
    b, sent = await _one_on_an_idle_engine(0.02, hold_s=0.03)
    assert b.first_token_t - sent < 0.02 + STEP + 0.004


async def test_a_front_end_ends_on_an_engine_busy_with_zero_time_steps() -> None:
    # no model time per step (the clock does not move), a front end of 20 ms: the request is
    # taken when that has passed on the wall clock, while the other one still decodes
    profile = Profile(request_overhead_s=0.02, block_size=16, kv_blocks=4096, max_model_len=10**7)
    engine = Engine(profile, SimMetrics("m", block_size=16, kv_blocks=4096, prefix_caching=True))
    task = asyncio.ensure_future(engine.run())
    try:
        a = _seq("a", 32, 3_000_000)
        engine.add(a)
        await asyncio.sleep(0.02)
        b = _seq("b", 16, 1)
        sent = time.monotonic()
        engine.submit(b, sent, 0.02)
        await _until(lambda: b.finished)
        waited = time.monotonic() - sent
    finally:
        engine.stop()
        await task
    assert not a.finished
    assert 0.02 <= waited < 0.5


def _dec(step: float, n: int, t0: float = 0.1) -> Call:
    times = [t0 + i * step for i in range(n)]
    return Call(start=0.0, times=times, counts=list(range(1, n + 1)), prompt_tokens=256)


def test_busy_bounds_are_the_step_starts_around_the_arrivals_prefill() -> None:
    dec = _dec(0.004, 40)
    t = dec.times
    # sent 1 ms after t[9]: its prefill shared the step t[12] -> t[13] with the stream
    a = Call(start=t[9] + 0.001, times=[t[13]], counts=[1], prompt_tokens=64)
    ((lo, hi, p),) = busy_bounds(dec, [a])
    assert (lo, hi, p) == (pytest.approx(t[11] - a.start), pytest.approx(t[12] - a.start), 64)
    # a chunk of two tokens at the boundary hides it: no bound
    held = Call(start=0.0, times=t, counts=[*range(1, 13), *range(14, 42)], prompt_tokens=256)
    assert busy_bounds(held, [a]) == []
    # a prefill after the stream ended bounds nothing
    assert busy_bounds(dec, [Call(start=t[-1], times=[t[-1] + 0.02], counts=[1])]) == []


def test_the_busy_front_end_is_where_most_bounds_overlap() -> None:
    fe = 0.0052
    bounds = [(fe - f * 0.004, fe + (1 - f) * 0.004, 64) for f in (0.1, 0.3, 0.5, 0.7, 0.9)]
    got = fit_busy_overhead(bounds, 0.0)
    assert got == pytest.approx(fe, abs=0.0004)
    # a bound a load spike moved (the arrival was late by a whole step) does not move it
    assert fit_busy_overhead([*bounds, (0.012, 0.016, 64)], 0.0) == pytest.approx(got)
    # the per-token part is taken off
    assert fit_busy_overhead(bounds, 1e-6) == pytest.approx(got - 64e-6)
    assert math.isnan(fit_busy_overhead([], 0.0))  # nothing measured


def test_the_note_counts_bounds_that_agree_without_the_per_token_part() -> None:
    # Seen on a simulator with a 20 ms front end and 2 us per token: this arrival's front end
    # (20.128 ms with its 64 tokens) ended after 20.108 ms, which the 19.995 ms taken for
    # the per-request part agrees with once the 0.128 ms per-token part is off its bound.
    agrees = (0.020108, 0.029291, 64)
    disagrees = (0.0205, 0.03, 64)  # 20.372 ms without the per-token part: above it
    note = _busy_note([agrees, disagrees], 2e-6, 0.019995, 0.03)
    assert note["arrivals"] == 2 and note["consistent"] == 1
    assert _busy_note([agrees], 0.0, 0.019995, 0.03)["consistent"] == 0


def _profile_from(busy: list[tuple[float, float, int]], idle_over: float) -> Profile:
    params = dict.fromkeys(PARAMS, 0.0)
    params.update(request_overhead_s=idle_over, step_overhead_s=0.002)
    probe = ProbeResult(busy=busy)
    info = ServerInfo("vllm", "0.32.0", "m", None, None, None, is_sim=False)
    return build_profile("p", BUILTIN_PROFILES["tiny-cpu"], Fit(params, []), probe, info, {})


def test_a_quicker_busy_front_end_moves_the_difference_to_the_idle_wake() -> None:
    bounds = [(0.005 - f * 0.004, 0.005 + (1 - f) * 0.004, 64) for f in (0.2, 0.5, 0.8)]
    p = _profile_from(bounds, 0.0075)
    assert p.request_overhead_s == pytest.approx(0.005, abs=5e-4)
    assert p.request_overhead_s + p.idle_wake_s == pytest.approx(0.0075, rel=1e-3)
    note = (p.calibration or {})["busy_start"]
    assert note["arrivals"] == 3 and note["consistent"] == 3
    # a busy front end no quicker than the idle one leaves the fit as it was
    p = _profile_from(bounds, 0.004)
    assert (p.request_overhead_s, p.idle_wake_s) == (0.004, 0.0)
    # and without the pattern (a run's records) there is no idle wake
    assert _profile_from([], 0.0075).idle_wake_s == 0.0


def test_only_measured_profiles_have_the_term() -> None:
    for name, profile in BUILTIN_PROFILES.items():
        if name != "vllm-cpu-tiny":
            assert profile.idle_wake_s == 0, name
