"""`sim calibrate` reads the prefill chunk off vllm:iteration_tokens_total only when the
histogram can show it (several observations for one long prompt)."""

from __future__ import annotations

import aiohttp

from agentload.calibration.calibrate import detect_budget
from agentload.calibration.prompts import PromptMaker
from agentload.calibration.stream import Target
from agentload.sim import SimConfig, SimServer
from agentload.sim.profiles import load_profile


async def _detect(budget: int) -> int | None:
    profile = load_profile("tiny-cpu").model_copy(update={"max_num_batched_tokens": budget})
    async with (
        SimServer(SimConfig(port=0, profile=profile, speedup=50, model="m")) as sim,
        aiohttp.ClientSession() as http,
    ):
        return await detect_budget(http, Target(sim.base_url, "m"), PromptMaker(), 16384)


async def test_a_chunked_prompt_shows_the_chunk() -> None:
    assert await _detect(2048) == 2048


async def test_one_observation_does_not_tell_the_chunk() -> None:
    # One step took the whole prompt here; vLLM shows the same single observation for a
    # prompt it prefilled in 2,048-token chunks, so no budget is claimed from it.
    assert await _detect(16384) is None
