"""The front end's cost to the engine's steps (`frontend_step_s`) and the probe's reading of it."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from agentload.calibration.probe import frontend_gaps
from agentload.calibration.prompts import PromptMaker
from agentload.calibration.stream import Call, Target, model_clock, stream_call
from agentload.sim import SimConfig, SimServer
from agentload.sim.engine import Engine, Seq
from agentload.sim.metrics import SimMetrics
from agentload.sim.profiles import BUILTIN_PROFILES, Profile
from null_output import NullOutput


def _step(engine: Engine) -> float:
    scheduled, dt = engine.schedule()
    engine.complete(scheduled, 0.0)
    return dt


def test_a_step_that_starts_while_a_request_is_in_the_front_end_costs_more() -> None:
    profile = Profile(step_overhead_s=0.001, frontend_step_s=0.003, block_size=16, kv_blocks=64)
    engine = Engine(profile, SimMetrics("m", block_size=16, kv_blocks=64, prefix_caching=True))
    engine.add(Seq("a", 32, [], 8, 8, NullOutput(), ignore_eos=True))
    assert _step(engine) == pytest.approx(0.001)
    engine.in_frontend = 2  # two requests tokenising: the step pays once
    assert _step(engine) == pytest.approx(0.004)
    engine.in_frontend = 0
    assert _step(engine) == pytest.approx(0.001)


def test_only_measured_profiles_have_the_term() -> None:
    for name, profile in BUILTIN_PROFILES.items():
        if name != "vllm-cpu-tiny":
            assert profile.frontend_step_s == 0, name


def _call(start: float, times: list[float], counts: list[int]) -> Call:
    return Call(start=start, times=times, counts=counts)


def test_frontend_gaps_are_the_steps_between_an_arrival_and_its_prefill() -> None:
    # a stream's tokens every 2 ms, then 5 ms while an arrival (sent at 10.5 ms) is in the
    # front end, then the 9 ms step that prefilled it beside the stream, then 2 ms again
    times = [0.000, 0.002, 0.004, 0.006, 0.008, 0.010, 0.012, 0.017, 0.022, 0.031, 0.033]
    dec = _call(0.0, times, list(range(1, len(times) + 1)))
    arrival = _call(0.0105, [0.0312], [1])
    got = frontend_gaps(dec, [arrival])
    # the step in progress when it was sent (10 -> 12 ms) counts, the ones before it and the
    # mixed one do not
    assert got == pytest.approx([0.002, 0.005, 0.005])
    # a chunk that carried two tokens hides a step: left out too
    counts = list(range(1, len(times) + 1))
    counts[7:] = [c + 1 for c in counts[7:]]
    assert frontend_gaps(_call(0.0, times, counts), [arrival]) == pytest.approx([0.002, 0.005])
    # an arrival that never got a token, or came after the stream, gives nothing
    assert frontend_gaps(dec, [_call(0.0105, [], [])]) == []
    assert frontend_gaps(dec, [_call(0.04, [0.05], [1])]) == []


async def test_a_request_counts_in_the_front_end_from_arrival_to_the_queue_only() -> None:
    slow_front = Profile(request_overhead_s=0.3, step_overhead_s=0.001, block_size=16)
    async with SimServer(SimConfig(port=0, profile=slow_front, model="m")) as sim:
        engine = sim.sim.engine
        url = f"{sim.base_url}/chat/completions"
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        async with aiohttp.ClientSession() as http:
            task = asyncio.ensure_future(http.post(url, json=body))
            await asyncio.sleep(0.1)
            assert engine.frontend_requests == 1  # still in its 300 ms front end
            async with await task as r:
                assert r.status == 200
                await r.read()
            assert engine.frontend_requests == 0
            # a request refused before the engine leaves the count too
            async with http.post(url, json=dict(body, max_tokens=10**9)) as r:
                assert r.status == 400
            # and so does one whose client went away during its front end
            gone = asyncio.ensure_future(http.post(url, json=body))
            await asyncio.sleep(0.1)
            gone.cancel()
            await asyncio.sleep(0.4)
            assert engine.frontend_requests == 0


async def test_the_step_in_progress_when_a_request_arrives_pays_the_front_end_once() -> None:
    # 4 ms steps; a request's 10 ms front end costs each step it overlaps 2 ms, the one in
    # progress when it arrives included, and a step pays once however many requests arrive
    profile = Profile(
        step_overhead_s=0.004, frontend_step_s=0.002, request_overhead_s=0.010,
        block_size=16, kv_blocks=256,
    )  # fmt: skip
    prompts = PromptMaker(None, 3)
    async with SimServer(SimConfig(port=0, profile=profile, model="m")) as sim:
        target = Target(sim.base_url, "m", model_times=True)
        async with aiohttp.ClientSession() as http:
            dec = Call(start=0.0)
            task = asyncio.ensure_future(stream_call(http, target, prompts.prompt(32), 80, dec))
            while not dec.counts or dec.counts[-1] < 15:  # noqa: ASYNC110
                await asyncio.sleep(0.001)
            one = asyncio.ensure_future(stream_call(http, target, prompts.prompt(16), 1))
            await asyncio.sleep(0.003)
            two = await stream_call(http, target, prompts.prompt(16), 1)
            d, a, b = [await model_clock(http, target, c) for c in (await task, await one, two)]
    gaps = [t1 - t0 for t0, t1 in zip(d.times, d.times[1:], strict=False)]
    assert all(g == pytest.approx(0.004) or g == pytest.approx(0.006) for g in gaps), gaps
    for arrival in (a.start, b.start):
        # the gap of the stream during which the request arrived
        k = next(i for i, t in enumerate(d.times) if t > arrival)
        assert d.times[k] - d.times[k - 1] == pytest.approx(0.006), (
            arrival,
            d.times[k - 2 : k + 2],
        )
    # plain steps before the first arrival and after the last request left the front end
    assert gaps[5] == pytest.approx(0.004) and gaps[-1] == pytest.approx(0.004)
