"""An engine idle for a while starts its next step late (`idle_wake_per_s`), and the probe's
idle pattern reads that back."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from agentload.calibration.fit import fit_idle_wake
from agentload.calibration.stream import Target, model_clock, stream_call
from agentload.sim import SimConfig, SimServer
from agentload.sim.profiles import BUILTIN_PROFILES, Profile

RATE, CAP = 0.002, 2.0


async def test_the_first_step_after_idle_pays_per_idle_second_up_to_the_cap() -> None:
    profile = Profile(
        step_overhead_s=0.002, idle_wake_per_s=RATE, idle_wake_cap_s=CAP, block_size=16
    )
    # speedup 10: 0.5 s of wall time idle is 5 s of model time, past the 2 s cap
    async with SimServer(SimConfig(port=0, profile=profile, speedup=10, model="m")) as sim:
        t = Target(sim.base_url, "m", model_times=True)
        prompt = "the same short prompt " * 8
        async with aiohttp.ClientSession() as http:

            async def call() -> tuple[float, float]:
                c = await model_clock(http, t, await stream_call(http, t, prompt, 8))
                return c.start, c.ttft

            prev = await model_clock(http, t, await stream_call(http, t, prompt, 8))
            near_start, near_ttft = await call()
            await asyncio.sleep(0.5)
            far = await model_clock(http, t, await stream_call(http, t, prompt, 8))
    near_idle = near_start - prev.times[-1]
    assert 0 <= near_idle < CAP
    # the far request's first step paid the cap; later steps paid nothing
    assert far.ttft - near_ttft == pytest.approx(RATE * (CAP - near_idle), abs=5e-5)
    assert far.tpot() == pytest.approx(prev.tpot(), abs=1e-9)


def test_fit_takes_the_median_difference_per_second_and_never_a_negative_one() -> None:
    assert fit_idle_wake([0.002, 0.003, 0.010], 5.0) == pytest.approx(0.0006)
    assert fit_idle_wake([-0.001, -0.0005, 0.0002], 5.0) == 0.0
    assert fit_idle_wake([], 5.0) == 0.0


def test_only_measured_profiles_have_the_term() -> None:
    for name, profile in BUILTIN_PROFILES.items():
        if name != "vllm-cpu-tiny":
            assert profile.idle_wake_per_s == 0, name
