"""Steps shorter than the engine's final spin (a high --speedup) still let the event loop run:
an in-process client, a second request, a timer all progress while the engine is busy."""

from __future__ import annotations

import asyncio
import time

import aiohttp

from agentload.calibration.prompts import PromptMaker
from agentload.calibration.stream import Call, Target, stream_call
from agentload.sim import SimConfig, SimServer
from agentload.sim.profiles import Profile

# 5 ms steps at speedup 20: 0.25 ms of wall time each, well inside the 1 ms spin
FAST = Profile(
    name="fast-steps",
    step_overhead_s=0.005,
    prefill_token_s=1e-6,
    max_num_batched_tokens=2048,
    block_size=16,
)


async def test_the_loop_runs_between_short_steps() -> None:
    async with SimServer(SimConfig(port=0, profile=FAST, speedup=20, model="m")) as sim:
        target = Target(sim.base_url, "m")
        prompt = PromptMaker(None, 1).text(64)
        ticks: list[float] = []
        async with aiohttp.ClientSession() as http:
            dec = Call(start=0.0)
            task = asyncio.ensure_future(stream_call(http, target, prompt, 400, dec))
            seen: list[int] = []
            while not task.done():
                await asyncio.sleep(0.002)
                ticks.append(time.perf_counter())
                seen.append(dec.counts[-1] if dec.counts else 0)
            call = task.result()
    # 400 steps of 0.25 ms: about 100 ms of streaming, watched every 2 ms
    assert call.tokens == 400
    assert len(ticks) >= 20, len(ticks)
    # the client saw the stream grow step by step, not all of it at the end
    assert len(set(seen)) >= 10, seen
    assert len(call.times) >= 20
