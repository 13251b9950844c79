"""The simulator's first-token hold on the wire, and calibration reading it back."""

from __future__ import annotations

import aiohttp
import pytest

from agentload.calibration.fit import fit_first_hold
from agentload.calibration.prompts import PromptMaker
from agentload.calibration.stream import Target, stream_call
from agentload.sim import SimConfig, SimServer
from agentload.sim.profiles import Profile

HELD = Profile(
    name="held",
    step_overhead_s=0.002,
    decode_seq_s=0.0002,
    prefill_token_s=1e-6,
    coalesce_first_p=0.3,
    coalesce_first_run=0.8,
    block_size=16,
)


async def _first_chunks(base_url: str, streams: int, tokens: int) -> list[tuple[int, int]]:
    # model_times: the probe then reads the simulator's chunks by their HTTP framing
    target = Target(base_url, "m", model_times=True)
    maker = PromptMaker(seed=3)
    out = []
    async with aiohttp.ClientSession() as http:
        for _ in range(streams):
            c = await stream_call(http, target, maker.text(32), tokens)
            assert c.tokens == tokens
            out.append((c.counts[0], c.tokens))
    return out


async def test_a_share_of_streams_starts_held_and_calibration_reads_it_back() -> None:
    async with SimServer(SimConfig(port=0, profile=HELD, speedup=20, model="m")) as sim:
        chunks = await _first_chunks(sim.base_url, 64, 24)
    held = [k for k, _ in chunks if k > 1]
    # the van der Corput draw holds 0.3 × 64 ≈ 19 of 64 consecutive streams, not a lucky count
    assert abs(len(held) - 0.3 * 64) <= 1.5
    p, r = fit_first_hold(chunks)
    assert p == pytest.approx(0.3, abs=0.03)
    # r comes from about a hundred seeded coin flips: a sampling error of about 5 %
    assert r == pytest.approx(0.8, rel=0.15)


async def test_without_the_hold_every_first_chunk_is_one_token() -> None:
    plain = HELD.model_copy(update={"coalesce_first_p": 0.0, "coalesce_first_run": 0.0})
    async with SimServer(SimConfig(port=0, profile=plain, speedup=20, model="m")) as sim:
        chunks = await _first_chunks(sim.base_url, 16, 8)
    assert {k for k, _ in chunks} == {1}
    assert fit_first_hold(chunks) == (0.0, 0.0)
